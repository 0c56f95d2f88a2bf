"""Why the steps of live runs wait, counted for the metrics (docs/pools.md, "Waiting,
measured"): held back by their run's window (``turn``), waiting for a semaphore's slot, for
their namespace's running-steps quota (``quota``), for a retry's backoff, or for an
approval gate's answer (``approval``). Pure: from the
records and the time given."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from heddle.shared.core.labels import DEFAULT_POOL, label_key
from heddle.shared.core.quotas import quota_namespace
from heddle.shared.wire.contracts import StepRecord
from heddle.shared.wire.timefmt import epoch_of

Series = tuple[str, str]  # pool, reason


@dataclass(slots=True)
class Tally:
    count: int = 0
    oldest: float = 0.0  # seconds the longest of them has waited


def pool_of(step: StepRecord) -> str:
    return label_key(step.runs_on) or DEFAULT_POOL


def reason_of(step: StepRecord, succeeded: set[str], held: set[str]) -> str | None:
    if step.status == "retrying":
        return "backoff"
    if step.status == "waiting":
        return "approval"
    if step.status == "pending" and step.semaphore_wait:
        return "quota" if quota_namespace(step.semaphore_wait) is not None else "semaphore"
    if step.status == "pending" and step.id in held and set(step.depends_on) <= succeeded:
        return "turn"
    return None


def since(step: StepRecord, steps: dict[str, StepRecord], created: float) -> float:
    """When the step began to wait: its last attempt's end (a backoff), its gate's start,
    else when its last
    dependency ended (else its run's creation)."""
    if step.status == "retrying" and step.finished_at:
        return epoch_of(step.finished_at, created)
    if step.status == "waiting" and step.started_at:
        return epoch_of(step.started_at, created)
    ends = [epoch_of(steps[d].finished_at or "", created) for d in step.depends_on if d in steps]
    return max(ends, default=created)


def tally_run(
    steps: dict[str, StepRecord],
    held: Iterable[str],
    created: float,
    now: float,
    into: dict[Series, Tally],
) -> None:
    """Add one run's waiting steps to ``into``."""
    held_ids = set(held)
    succeeded = {s.id for s in steps.values() if s.status == "succeeded"}
    for step in steps.values():
        reason = reason_of(step, succeeded, held_ids)
        if reason is None:
            continue
        t = into.setdefault((pool_of(step), reason), Tally())
        t.count += 1
        t.oldest = max(t.oldest, now - since(step, steps, created))
