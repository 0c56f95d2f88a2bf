"""shared/core/approvals.py: an approve or reject body's problems, and the sentences a gate
that takes no answer is refused with (docs/approvals.md)."""

from __future__ import annotations

from heddle.shared.core.approvals import (
    MAX_COMMENT,
    answer_problems,
    answered,
    not_waiting,
    timed_out,
)
from heddle.shared.wire.contracts import ApprovalDecision, ApprovalGate

AT = "2026-12-06T10:00:00.000Z"


def paths(body: object) -> list[str]:
    return [p.path for p in answer_problems(body)]


def test_a_body_is_nothing_or_a_comment() -> None:
    assert paths({}) == [] and paths({"comment": "ok"}) == []
    assert paths({"comment": "x" * MAX_COMMENT}) == []


def test_every_problem_of_a_body_is_named() -> None:
    assert paths({"comment": "x" * (MAX_COMMENT + 1), "who": "me"}) == ["who", "comment"]
    assert paths({"comment": 3}) == ["comment"]
    assert paths(["ok"]) == [""]


def test_an_answered_gate_says_how_by_whom_and_when() -> None:
    yes = ApprovalDecision(approved=True, by="alice", decided_at=AT)
    no = ApprovalDecision(approved=False, by="bob", decided_at=AT, comment="no")
    late = ApprovalDecision(approved=False, by="timeout", decided_at=AT)
    assert answered("ok", yes) == f"step 'ok' was answered already: approved by alice at {AT}"
    assert "rejected by bob" in answered("ok", no)
    assert "timed out" in answered("ok", late)
    assert "not waiting for an answer yet" in not_waiting("ok", "pending")
    assert not_waiting("ok", "cancelled") == "step 'ok' is cancelled, not waiting for an answer"


def test_a_gate_past_its_deadline_takes_no_answer() -> None:
    gate = ApprovalGate(run_id="r", step_id="ok", attempt=1, message="m", since=AT)
    assert not timed_out(gate, "2030-01-01T00:00:00Z")  # no timeout: never
    gate.deadline_at = "2026-12-06T10:01:00.000Z"
    assert not timed_out(gate, "2026-12-06T10:00:59.999Z")
    assert timed_out(gate, "2026-12-06T10:01:00.000Z")
