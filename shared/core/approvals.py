"""An answer to an approval gate (docs/approvals.md), as the HTTP API takes it: the body's
checks, and the sentence a gate answered already is refused with. Pure: no I/O."""

from __future__ import annotations

from heddle.shared.wire.contracts import ApprovalDecision, ApprovalGate
from heddle.shared.wire.errors import Problem
from heddle.shared.wire.timefmt import epoch_of

MAX_COMMENT = 4096  # characters of an answer's comment
TIMED_OUT = "timeout"  # ApprovalDecision.by of a gate whose time ran out
ANSWER_FIELDS = {"comment"}


def answer_problems(body: object) -> list[Problem]:
    """Every problem of an approve or reject body: none, or ``{"comment": "..."}``."""
    if not isinstance(body, dict):
        return [Problem("", "the body must be a JSON object (or absent)")]
    problems = [Problem(k, "unknown field") for k in sorted(set(body) - ANSWER_FIELDS)]
    comment = body.get("comment", "")
    if not isinstance(comment, str):
        problems.append(Problem("comment", "comment must be a string"))
    elif len(comment) > MAX_COMMENT:
        problems.append(
            Problem("comment", f"comment is {len(comment)} characters; at most {MAX_COMMENT}")
        )
    return problems


def timed_out(gate: ApprovalGate, now: str) -> bool:
    """Whether a gate's time ran out by ``now`` (RFC 3339): no answer is taken then, even
    before the orchestrator's timer has failed it, so an answer never wins after it."""
    return gate.deadline_at is not None and epoch_of(gate.deadline_at, 0.0) <= epoch_of(now, 0.0)


def answered(step_id: str, decision: ApprovalDecision) -> str:
    """Why a gate answered already takes no other answer: how, by whom, and when."""
    if decision.by == TIMED_OUT:
        return f"step {step_id!r} was answered already: it timed out at {decision.decided_at}"
    how = "approved" if decision.approved else "rejected"
    return f"step {step_id!r} was answered already: {how} by {decision.by} at {decision.decided_at}"


def not_waiting(step_id: str, status: str) -> str:
    """Why a gate that is not waiting (not yet, or no more) takes no answer."""
    if status == "pending":
        return f"step {step_id!r} is not waiting for an answer yet: its dependencies have not"
    return f"step {step_id!r} is {status}, not waiting for an answer"
