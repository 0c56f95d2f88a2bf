"""`heddle approve`, `reject` and `approvals` without I/O: their command lines parsed, their
views (services/cli/approvals.py) and their completion. Against a real stack:
tests/integration/test_approvals_cli.py."""

from __future__ import annotations

from heddle.services.cli import approvals, completion
from heddle.services.cli.commands import COMMANDS
from heddle.services.cli.main import parser


def test_the_commands_parse_and_complete() -> None:
    args = parser().parse_args(["approve", "r1", "gate", "--comment", "ok", "--json"])
    assert (args.command, args.run, args.step, args.comment, args.json) == (
        "approve",
        "r1",
        "gate",
        "ok",
        True,
    )
    assert parser().parse_args(["reject", "r1", "gate"]).comment is None
    assert {"approve", "reject", "approvals"} <= COMMANDS.keys()
    script = completion.script(parser(), "bash")
    assert "approve) COMPREPLY=($(compgen -W" in script and "--comment" in script
    assert "approvals) COMPREPLY" in script


def test_a_decision_is_one_line() -> None:
    args = parser().parse_args(["reject", "r1", "gate"])
    decision = {"approved": False, "by": "ops", "decidedAt": "t"}
    answer = {"runId": "r1", "stepId": "gate", "attempt": 1, "decision": decision}
    assert approvals.decision_line(args)(answer) == "step gate of run r1 rejected by ops"
    approved = {**decision, "approved": True, "comment": "fine"}
    said = approvals.decision_line(args)({**answer, "decision": approved})
    assert said == "step gate of run r1 approved by ops: fine"


def test_waiting_gates_are_a_table() -> None:
    assert approvals.approvals_view([]) == "no approvals waiting"
    gate = {
        "runId": "r1",
        "namespace": "default",
        "stepId": "gate",
        "message": "Ship it?",
        "since": "2026-01-01T00:00:00Z",
        "deadlineAt": None,
        "workflowName": "release",
    }
    header, row = approvals.approvals_view([gate]).splitlines()
    assert header.split() == [
        "RUN",
        "STEP",
        "NAMESPACE",
        "WORKFLOW",
        "SINCE",
        "DEADLINE",
        "MESSAGE",
    ]
    assert row.split() == ["r1", "gate", "default", "release", gate["since"], "-", "Ship", "it?"]
