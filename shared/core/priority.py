"""A run's priority (docs/workflows.md, "Priority"): an integer, higher first, 0 by default.
Its check, and how many waiting runs of higher priority a waiting run is behind. Pure: no
I/O.

The count is worked out by whoever reads the runs (the gateway, from its index of run
records), not stored: it changes whenever a run of higher priority arrives or is admitted,
and a stored count would cost a write of every waiting run then, and still lag.
"""

from __future__ import annotations

from collections.abc import Iterable

from heddle.shared.wire.contracts import MAX_PRIORITY, MIN_PRIORITY, RunRecord
from heddle.shared.wire.errors import Problem


def priority_problems(value: object, path: str = "priority") -> list[Problem]:
    """A priority as a document gives it: an integer from MIN_PRIORITY to MAX_PRIORITY."""
    if isinstance(value, int) and not isinstance(value, bool):
        if MIN_PRIORITY <= value <= MAX_PRIORITY:
            return []
    return [
        Problem(
            path,
            f"priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}, not {value!r}",
        )
    ]


def line_key(priority: int, arrival: int) -> tuple[int, int]:
    """A waiting run's place in its line: the highest priority first, then the first come."""
    return (-priority, arrival)


def higher_priority_ahead(run: RunRecord, waiting: Iterable[RunRecord]) -> int:
    """How many of ``waiting`` are of higher priority than ``run``: those are admitted
    before it, whenever they came (a run waiting for its quota or concurrency key is in no
    such line yet). Each orchestrator keeps its own line, for the partitions
    it holds: with several, ``waiting`` should be the waiting runs of partitions the same
    orchestrator holds; all the waiting runs count the most it can be."""
    return sum(
        1
        for other in waiting
        if other.waiting
        and other.concurrency_wait is None
        and not other.quota_wait
        and other.status == "running"
        and other.run_id != run.run_id
        and other.priority > run.priority
    )


def behind_reason(ahead: int) -> str:
    """The ``waitingFor`` reason of a waiting run behind ``ahead`` runs of higher priority."""
    return f"behind {ahead} run{'' if ahead == 1 else 's'} of higher priority"
