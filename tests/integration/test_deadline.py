"""Run deadlines against a real stack (docs/workflows.md, "Run deadlines"): a workflow's
timeoutSeconds stops its run, kills what runs and cancels what waits, and fails the run with
the reason; registered workflows' runs and their retries carry it. The state machine's side
alone: tests/unit/orchestrator/test_deadline_state.py; an orchestrator killed meanwhile:
tests/fault/test_deadline_faults.py."""

from __future__ import annotations

from pathlib import Path

from heddle.shared.wire.timefmt import parse

from tests.support.deadlines import outlived, outliving, stopped_at_deadline
from tests.support.stack import StackFactory, step_of


async def test_a_run_past_its_deadline_is_killed_cancelled_and_failed(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    pid_file = tmp_path / "sleep.pid"
    run_id = await s.submit(outliving(2, pid_file))
    run = await s.wait_run(run_id, timeout=20)  # not the 30 s of the step
    await outlived(run, 2, pid_file)
    # The cancelled step's log says why.
    _, dump = await s.request("GET", f"/api/runs/{run_id}/steps/after/logs")
    assert f"cancelled: {run['reason']}" in str(dump), dump


async def test_a_run_within_its_deadline_is_untouched_and_its_retries_keep_their_timers(
    stack: StackFactory,
) -> None:
    """The deadline's schedule is the run's own: a step's retry timer, on the same run's
    subjects beside it, still fires."""
    s = await stack(runners=1)
    quick = await s.submit({"timeoutSeconds": 30, "steps": [{"id": "a", "command": "true"}]})
    run = await s.wait_run(quick)
    assert (run["status"], run["reason"], run["timeoutSeconds"]) == ("succeeded", None, 30)
    assert run["deadlineAt"] is not None
    flaky = await s.submit(
        {"timeoutSeconds": 60, "steps": [{"id": "a", "command": "exit 3", "retries": 2}]}
    )
    run = await s.wait_run(flaky)
    a = step_of(run, "a")
    assert (run["status"], run["reason"], a["attempt"]) == ("failed", None, 3), run
    plain = await s.wait_run(await s.submit({"steps": [{"id": "a", "command": "true"}]}))
    assert (plain["timeoutSeconds"], plain["deadlineAt"], plain["reason"]) == (None, None, None)


async def test_a_registered_workflow_s_runs_and_their_retries_carry_its_deadline(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    doc = {"name": "nightly", "timeoutSeconds": 1.5, "steps": [{"id": "a", "command": "sleep 30"}]}
    status, body = await s.request("POST", "/api/workflows", json=doc)
    assert status == 201, body
    status, body = await s.request("GET", "/api/workflows/nightly")
    assert (status, body["timeoutSeconds"]) == (200, 1.5), body
    status, body = await s.request("POST", "/api/workflows/nightly/runs")
    assert status == 201, body
    run = await s.wait_run(body["runId"], timeout=20)
    stopped_at_deadline(run, 1.5)
    assert (run["workflowName"], run["version"]) == ("nightly", 1)
    # Its retry has a deadline of its own, from its own creation.
    status, body = await s.request("POST", f"/api/runs/{run['runId']}/retry")
    assert status == 201, body
    retry = await s.wait_run(body["runId"], timeout=20)
    stopped_at_deadline(retry, 1.5)
    assert parse(retry["deadlineAt"]) > parse(run["deadlineAt"])


async def test_a_bad_timeout_is_refused_at_its_path(stack: StackFactory) -> None:
    s = await stack(runners=0, services=("gateway",))
    steps = [{"id": "a", "command": "true"}]
    for path, doc in [
        ("/api/workflows", {"name": "wf", "timeoutSeconds": 0, "steps": steps}),
        ("/api/runs", {"timeoutSeconds": "soon", "steps": steps}),
        ("/api/runs", {"timeoutSeconds": 8 * 86400, "steps": steps}),
    ]:
        status, body = await s.request("POST", path, json=doc)
        assert status == 400, body
        assert [p["path"] for p in body["problems"]] == ["timeoutSeconds"], body
