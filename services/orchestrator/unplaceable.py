"""Which queued steps no runner can take, and for how long (docs/pools.md, "No runner with
those labels"). Pure: no I/O, no clock.

A step whose runsOn names labels that no registered runner has waits in the stream, where no
dispatcher takes it; so does one whose labels' runners all serve other namespaces than its
run's (docs/namespaces.md). It fails once it has waited so for HEDDLE_NO_RUNNER_TIMEOUT,
unless a pool that autoscaling may grow could take it: that pool's runners are on their way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from heddle.shared.core.pool_namespaces import namespace_refusal, takes_step

AttemptId = tuple[str, str, int]  # run, step, attempt


@dataclass(frozen=True, slots=True)
class Waiting:
    """A queued attempt that asks for labels."""

    run_id: str
    step_id: str
    attempt: int
    runs_on: Sequence[str]

    @property
    def key(self) -> AttemptId:
        return self.run_id, self.step_id, self.attempt


@dataclass(frozen=True, slots=True)
class Runner:
    pool: str
    labels: Sequence[str]
    namespaces: Sequence[str] = ()  # the only ones whose steps it takes; none: every one


class Unplaceable:
    """The attempts seen with no runner to take them, since when (this process's clock)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.since: dict[AttemptId, float] = {}

    def verdicts(
        self,
        waiting: Iterable[Waiting],
        runners: Sequence[Runner],
        growable: Sequence[Runner],
        now: float,
    ) -> list[tuple[Waiting, str]]:
        """The attempts to fail now, each with its reason. An attempt a runner can take, or
        a pool being grown could (``growable``: one runner of each, as it will register),
        starts its count again when it next has none."""
        seen: dict[AttemptId, float] = {}
        out: list[tuple[Waiting, str]] = []
        able = (*runners, *growable)
        for step in waiting:
            if any(takes_step(r, step.runs_on, step.run_id) for r in able):
                continue
            since = seen[step.key] = self.since.get(step.key, now)
            if now - since >= self.timeout:
                out.append((step, reason(step, able, now - since)))
        self.since = seen  # forgets the attempts that ended, or found a runner
        return out


def reason(step: Waiting, runners: Sequence[Runner], waited: float) -> str:
    if (why := namespace_refusal(runners, step.runs_on, step.run_id)) is not None:
        return (
            f"{why}: no runner that may take it registered for {waited:.0f}s "
            "(HEDDLE_NO_RUNNER_TIMEOUT)"
        )
    return (
        f"no runner has the labels {', '.join(sorted(step.runs_on)) or 'default'}: "
        f"none registered for {waited:.0f}s (HEDDLE_NO_RUNNER_TIMEOUT)"
    )
