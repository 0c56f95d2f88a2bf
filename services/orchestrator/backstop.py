"""The backstop for a queued attempt that nobody holds.

A ready message leaves the HEDDLE_STEPS work queue only once a runner accepted it, and a
runner writes the attempt's first heartbeat before it accepts. So a queued attempt has, at
any moment, its ready message in the stream or a heartbeat in the watchdog's view, and the
watchdog takes it from there (a step handed to a runner has neither until it answers,
within the assignment timeout: far less than a check's period). A broker killed at the
wrong moment can break that: the writes of its last moments (a heartbeat, an event) are
lost with it while a consumer's acknowledgement survived, and then nothing would ever move
the step again: the run would hang.

Every check (one silence limit apart) this looks at the attempts that have been queued,
with no runner and no heartbeat of theirs, since the previous check. Their run's ready
subjects are listed in one request; an attempt whose ready message is missing at two
checks in a row (a full period apart, so an acceptance in flight is never mistaken for a
loss) is lost. Its stored outcome is applied if there is one, else the same attempt is
queued again under a new message id: at least once, never never.

``LostAttempts`` is the bookkeeping, with no I/O; ``Backstop.check`` does the reads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from heddle.services.orchestrator.state import RunState
from heddle.services.orchestrator.watchdog import Beat


@dataclass(slots=True)
class Seen:
    attempt: int
    requeues: int
    since: float  # monotonic: when a check first saw it queued and unheld
    missing: bool = False  # its ready message was missing at the last check


class LostAttempts:
    def __init__(self, period: float) -> None:
        self.period = period
        self._seen: dict[str, dict[str, Seen]] = {}  # run -> step -> what the checks saw

    def reset(self) -> None:
        """Forget everything: after an outage every attempt starts over (a full period)."""
        self._seen.clear()

    def forget_run(self, run_id: str) -> None:
        self._seen.pop(run_id, None)

    def candidates(self, state: RunState, beats: dict[str, Beat], now: float) -> list[str]:
        """The run's steps queued, with no runner and no heartbeat of their attempt, since a
        period ago or longer (the same attempt and requeue). Everything else is forgotten."""
        run_id = state.run.run_id
        before = self._seen.get(run_id, {})
        after: dict[str, Seen] = {}
        out: list[str] = []
        for step in state.steps.values():
            if step.status != "queued" or step.runner is not None:
                continue
            beat = beats.get(step.id)
            if beat is not None and beat.attempt == step.attempt:
                continue
            seen = before.get(step.id)
            if seen is None or (seen.attempt, seen.requeues) != (step.attempt, step.requeues):
                seen = Seen(step.attempt, step.requeues, now)
            after[step.id] = seen
            if now - seen.since >= self.period:
                out.append(step.id)
        if after:
            self._seen[run_id] = after
        else:
            self._seen.pop(run_id, None)
        return out

    def lost(
        self, run_id: str, candidates: Iterable[str], ready: set[str]
    ) -> list[tuple[str, Seen]]:
        """Of ``candidates`` (from ``candidates`` just before), those whose ready message is
        missing now and was at the previous check too, with the attempt they were seen at."""
        seen_run = self._seen.get(run_id, {})
        out: list[tuple[str, Seen]] = []
        for step_id in candidates:
            seen = seen_run.get(step_id)
            if seen is None:
                continue
            if step_id in ready:
                seen.missing = False
            elif seen.missing:
                out.append((step_id, seen))
            else:
                seen.missing = True
        return out


@dataclass(frozen=True, slots=True)
class Finding:
    run_id: str
    step_id: str
    attempt: int
    requeues: int


class Backstop:
    """One check over the live runs; the reads are injected (``stored.ready_steps``)."""

    def __init__(
        self, period: float, ready_steps: Callable[[str], Awaitable[set[str] | None]]
    ) -> None:
        self.tracker = LostAttempts(period)
        self._ready_steps = ready_steps

    async def check(
        self, states: Iterable[RunState], beats: dict[str, dict[str, Beat]], now: float
    ) -> list[Finding]:
        found: list[Finding] = []
        for state in states:
            run_id = state.run.run_id
            candidates = self.tracker.candidates(state, beats.get(run_id, {}), now)
            if not candidates:
                continue
            ready = await self._ready_steps(run_id)
            if ready is None:
                continue  # the server could not say: ask again next time
            for step_id, seen in self.tracker.lost(run_id, candidates, ready):
                found.append(Finding(run_id, step_id, seen.attempt, seen.requeues))
        return found
