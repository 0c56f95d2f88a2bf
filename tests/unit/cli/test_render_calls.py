"""`heddle status` of runs that call workflows (docs/sub-workflows.md): a call step shows its
child run where a runner would stand, and a child run names its parent."""

from __future__ import annotations

from heddle.services.cli import render


def test_a_call_step_shows_its_child_and_a_child_its_parent() -> None:
    call = {"id": "call", "status": "running", "attempt": 1, "childRun": "r1-call-1-abcd1234"}
    plain = {"id": "b", "status": "running", "attempt": 1, "runner": "runner-0"}
    run = {
        "runId": "r2",
        "status": "running",
        "createdAt": "2026-01-01T00:00:00.000Z",
        "finishedAt": None,
        "parentRun": "r0",
        "parentStep": "outer",
        "steps": [call, plain],
    }
    lines = render.run_view(run).splitlines()
    assert "called by run r0, step outer" in lines
    [row] = [line for line in lines if line.startswith("call ")]
    assert "child r1-call-1-abcd1234" in row
    [row] = [line for line in lines if line.startswith("b ")]
    assert "runner-0" in row
    assert "called by" not in render.run_view({**run, "parentRun": None})
