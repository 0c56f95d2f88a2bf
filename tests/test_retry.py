"""Re-running a failed run from its failure: POST /api/runs/{run}/retry (shared/core/retries.py)."""

from __future__ import annotations

from pathlib import Path

from heddle.shared.core.retries import refusal, retry_command, retry_run_id
from heddle.shared.wire.contracts import AttemptRecord, RunRecord, StepRecord

from tests.conftest import StackFactory
from tests.stack import step_of
from tests.test_cli import env_of, heddle


def test_a_retry_carries_the_successes_and_runs_the_rest() -> None:
    run = RunRecord(
        run_id="r1",
        status="failed",
        created_at="t",
        step_count=3,
        params={"p": "1"},
        scheduled_for="2025-01-01T06:00:00.000Z",
        scheduled_tz="UTC",
    )
    won = AttemptRecord(attempt=2, runner="x", exit_code=0, outputs={"k": "v"})
    steps = [
        StepRecord(id="c", command="c", index=2, depends_on=["b"], status="skipped"),
        StepRecord(id="a", command="a", index=0, status="succeeded", attempt=2, attempts=[won]),
        StepRecord(id="b", command="b", index=1, depends_on=["a"], status="failed", retries=3),
    ]
    cmd = retry_command(run, steps, "now")
    assert cmd.run_id == "r1-retry" and cmd.retry_of == "r1" and cmd.trigger == "retry"
    assert [s.id for s in cmd.steps] == ["a", "b", "c"] and cmd.steps[1].retries == 3
    assert cmd.carried == {"a": won}
    assert (cmd.params, cmd.scheduled_for) == ({"p": "1"}, "2025-01-01T06:00:00.000Z")
    assert len(retry_run_id("x" * 64)) <= 64
    assert refusal(run) is None
    for status, words in [("running", "still running"), ("succeeded", "is succeeded")]:
        live = RunRecord(run_id="r", status=status, created_at="t", step_count=1)  # type: ignore[arg-type]
        assert words in (refusal(live) or "")


async def test_retry_of_step_9_of_10_runs_only_step_9_and_after(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    ledger, fixed = tmp_path / "ledger", tmp_path / "fixed"
    steps = []
    for i in range(1, 11):
        command = f"echo s{i} >> {ledger}"
        if i == 3:
            command += "; echo token=t3 >> $HEDDLE_OUTPUTS"
        if i == 9:
            command += f"; test -f {fixed}"  # fails until the network is back
        if i == 10:
            command += '; echo "$HEDDLE_OUT_S3_TOKEN"'
        steps.append(
            {"id": f"s{i}", "command": command, "dependsOn": [f"s{i - 1}"] if i > 1 else []}
        )
    run_id = await s.submit({"steps": steps})
    run = await s.wait_run(run_id)
    assert run["status"] == "failed"
    assert (step_of(run, "s9")["status"], step_of(run, "s10")["status"]) == ("failed", "skipped")
    fixed.touch()
    status, body = await s.request("POST", f"/api/runs/{run_id}/retry")
    assert status == 201, body
    retry_id = body["runId"]
    retry = await s.wait_run(retry_id)
    assert retry["status"] == "succeeded", retry
    lines = ledger.read_text().split()
    assert [lines.count(f"s{i}") for i in range(1, 11)] == [1] * 8 + [2, 1]  # 1-8 ran once
    s3 = step_of(retry, "s3")
    assert (s3["status"], s3["outputs"]) == ("succeeded", {"token": "t3"})
    assert s3["reason"] == f"succeeded in run {run_id}; not run again"
    assert step_of(retry, "s10")["stdoutTail"] == "t3"  # carried outputs still pass on
    assert (retry["retryOf"], retry["trigger"]) == (run_id, "retry")
    assert (await s.run(run_id))["retriedBy"] == retry_id
    # Asked again: the same retry. A succeeded run, or one still running: 409.
    status, body = await s.request("POST", f"/api/runs/{run_id}/retry")
    assert (status, body["runId"], body["created"]) == (200, retry_id, False)
    status, body = await s.request("POST", f"/api/runs/{retry_id}/retry")
    assert (status, body["status"]) == (409, "succeeded"), body
    live = await s.submit({"steps": [{"id": "a", "command": "sleep 2"}]})
    status, body = await s.request("POST", f"/api/runs/{live}/retry")
    assert (status, body["status"]) == (409, "running"), body
    assert "still running" in body["error"]
    # A run that took the id a retry would have: the retry is refused, not answered as it.
    failed = await s.submit({"runId": "job", "steps": [{"id": "a", "command": "exit 1"}]})
    await s.submit({"runId": "job-retry", "steps": [{"id": "b", "command": "true"}]})
    assert (await s.wait_run(failed))["status"] == "failed"
    status, body = await s.request("POST", "/api/runs/job/retry")
    assert (status, body["status"]) == (409, "failed"), body
    assert "retry, 'job-retry', is taken by another run" in body["error"]


async def test_the_command_line_retries_and_passes_parameters(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=1)
    env = env_of(s)
    fixed = tmp_path / "fixed"
    run_id = await s.submit({"steps": [{"id": "a", "command": f"test -f {fixed}"}]})
    assert (await s.wait_run(run_id))["status"] == "failed"
    fixed.touch()
    rc, out, err = await heddle("retry", run_id, "--wait", env=env)
    assert rc == 0 and out.splitlines()[0] == f"{run_id}-retry", (out, err)
    doc = {
        "name": "greet",
        "params": [{"name": "who"}],
        "steps": [{"id": "a", "command": 'echo "hi $HEDDLE_PARAM_WHO"'}],
    }
    assert (await s.request("POST", "/api/workflows", json=doc))[0] == 201
    rc, out, err = await heddle("run", "greet", "-p", "who=$(id)", "--wait", env=env)
    assert rc == 0, err
    run = await s.run(out.splitlines()[0])
    assert step_of(run, "a")["stdoutTail"] == "hi $(id)"
    rc, _, err = await heddle("run", "greet", "-p", "nobody", env=env)
    assert rc == 2 and "give NAME=VALUE" in err
    # Refused by the gateway for what was given (400): a usage error, as a bad option is.
    rc, _, err = await heddle("run", "greet", env=env)
    assert rc == 2 and "missing required parameter 'who'" in err, err
    rc, _, err = await heddle("run", "greet", "-p", "who=me", "-p", "zz=3", env=env)
    assert rc == 2 and "unknown parameter 'zz'" in err, err
