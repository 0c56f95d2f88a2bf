"""shared/core/retries.py: a retry's submit, made from the run it retries. The retry through
a real stack: tests/integration/test_retry.py."""

from __future__ import annotations

from heddle.shared.core.retries import retry_command
from heddle.shared.wire.contracts import (
    Approval,
    AttemptRecord,
    RunRecord,
    StepRecord,
    StepSpec,
)


def record(sid: str, status: str, index: int, **fields: object) -> StepRecord:
    step = StepRecord(id=sid, command=f"echo {sid}", index=index, status=status, **fields)
    if status == "succeeded":
        step.attempts = [AttemptRecord(attempt=1, outputs={"k": sid})]
    return step


def test_a_retry_keeps_conditions_allowed_failures_and_exit_handlers() -> None:
    run = RunRecord(run_id="r", status="failed", created_at="2026-12-04T00:00:00Z", step_count=4)
    steps = [
        record("clean", "succeeded", 3, on_exit=True, allow_failure=True),
        record("a", "succeeded", 0),
        record("b", "failed", 1, depends_on=["a"], when="steps.a.status == 'succeeded'"),
        record("c", "skipped", 2, depends_on=["b"], allow_failure=True),
    ]
    cmd = retry_command(run, steps, "2026-12-04T01:00:00Z")
    assert [s.id for s in cmd.steps] == ["a", "b", "c"]
    assert cmd.steps[1] == StepSpec(
        id="b",
        command="echo b",
        depends_on=["a"],
        when="steps.a.status == 'succeeded'",
        timeout_seconds=3600.0,
    )
    assert cmd.steps[2].allow_failure
    assert [(s.id, s.allow_failure) for s in cmd.on_exit] == [("clean", True)]
    assert set(cmd.carried) == {"a"}  # an exit handler runs again: the run ends again


def test_a_retry_keeps_a_loop_and_carries_its_gathered_outputs() -> None:
    run = RunRecord(run_id="r", status="failed", created_at="2026-12-04T00:00:00Z", step_count=6)
    loop = record("each", "succeeded", 0, for_each="['x', 'y']", max_parallel=1, instances=2)
    loop.loop_outputs = {"k": '["each[0]","each[1]"]'}
    steps = [
        loop,
        record("again", "failed", 1, for_each="[1]", instances=1),
        record("each[0]", "succeeded", 2, parent="each", item="x", item_index=0),
        record("each[1]", "succeeded", 3, parent="each", item="y", item_index=1),
        record("again[0]", "failed", 4, parent="again", item="1", item_index=0),
    ]
    cmd = retry_command(run, steps, "2026-12-04T01:00:00Z")
    assert [(s.id, s.for_each, s.max_parallel) for s in cmd.steps] == [
        ("each", "['x', 'y']", 1),
        ("again", "[1]", None),
    ]
    assert set(cmd.carried) == {"each"}
    assert cmd.carried["each"].outputs == {"k": '["each[0]","each[1]"]'}


def test_a_retry_keeps_its_runs_concurrency_key() -> None:
    run = RunRecord(
        run_id="r",
        status="cancelled",
        created_at="2026-12-04T00:00:00Z",
        step_count=1,
        concurrency_key="deploy/prod",
        concurrency_limit=2,
        on_limit="cancelRunning",
    )
    cmd = retry_command(run, [record("a", "cancelled", 0)], "2026-12-04T01:00:00Z")
    assert (cmd.concurrency_key, cmd.concurrency_limit, cmd.on_limit) == (
        "deploy/prod",
        2,
        "cancelRunning",
    )


def test_a_retry_asks_a_gate_that_did_not_pass_again() -> None:
    run = RunRecord(run_id="r", status="failed", created_at="2026-12-04T00:00:00Z", step_count=2)
    gate = Approval(message="ship?", timeout_seconds=60)
    steps = [
        record("build", "succeeded", 0),
        StepRecord(id="ok", index=1, status="failed", depends_on=["build"], approval=gate),
    ]
    cmd = retry_command(run, steps, "2026-12-04T01:00:00Z")
    assert (cmd.steps[1].approval, cmd.steps[1].command) == (gate, "")
    assert set(cmd.carried) == {"build"}
