"""How far a run or step record has come (pure): the order of records read from two places
that carry no common revision, a live subscription and a snapshot (shared/broker/kv_changes.py).

A step's record only moves forward: a later attempt, the same attempt queued again after a
lost assignment, or a later status within the attempt. A run's moves from waiting to
under way, to stopping (cancelling, or past its deadline), to terminal. Records of equal
progress say the same thing to a reader.
"""

from __future__ import annotations

from heddle.shared.wire.contracts import TERMINAL_RUN, RunRecord, StepRecord

_STATUS_RANK = {
    "pending": 0,
    "queued": 1,
    "running": 2,
    "retrying": 3,
    "waiting": 3,  # an approval gate: from pending to its end, nothing between
    "succeeded": 4,
    "failed": 4,
    "skipped": 4,
    "cancelled": 4,
}

StepProgress = tuple[int, int, int]
RunProgress = tuple[bool, bool, bool]


def step_progress(rec: StepRecord) -> StepProgress:
    return (rec.attempt, rec.requeues, _STATUS_RANK[rec.status])


def run_progress(rec: RunRecord) -> RunProgress:
    stopping = rec.cancel_requested or rec.reason is not None
    return (rec.status in TERMINAL_RUN, stopping, not rec.waiting)
