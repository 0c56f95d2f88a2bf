"""Why live runs' steps wait, counted for the metrics (step_waits.py). Pure."""

from __future__ import annotations

from heddle.services.orchestrator.step_waits import Tally, tally_run
from heddle.shared.wire.contracts import StepRecord

T = 1_700_000_000.0


def step(sid: str, status: str, **more) -> StepRecord:
    return StepRecord(id=sid, command="true", status=status, **more)  # type: ignore[arg-type]


def test_each_wait_is_counted_by_pool_and_reason_with_the_longest() -> None:
    steps = {
        "a": step("a", "succeeded", finished_at="2023-11-14T22:13:30Z"),  # T + 10
        "held": step("held", "pending", depends_on=["a"]),
        "gpu": step("gpu", "pending", depends_on=["a"], runs_on=["gpu", "a100"]),
        "sem": step("sem", "pending", semaphore_wait="db"),
        "retry": step("retry", "retrying", finished_at="2023-11-14T22:13:40Z"),  # T + 20
        "later": step("later", "pending", depends_on=["held"]),  # not ready: not counted
        "off": step("off", "pending", depends_on=["a"]),  # ready, but not held back
    }
    found: dict = {}
    tally_run(steps, ["held", "gpu"], created=T, now=T + 30, into=found)
    assert {k: (t.count, t.oldest) for k, t in found.items()} == {
        ("default", "turn"): (1, 20.0),
        ("a100+gpu", "turn"): (1, 20.0),
        ("default", "semaphore"): (1, 30.0),
        ("default", "backoff"): (1, 10.0),
    }


def test_runs_add_up() -> None:
    found = {("default", "backoff"): Tally(2, 5.0)}
    tally_run({"r": step("r", "retrying")}, [], created=T, now=T + 9, into=found)
    assert (found[("default", "backoff")].count, found[("default", "backoff")].oldest) == (3, 9.0)


def test_a_waiting_gate_is_counted_from_its_start() -> None:
    found: dict = {}
    gate = step("ok", "waiting", started_at="2023-11-14T22:13:25Z")  # T + 5
    tally_run({"ok": gate}, [], created=T, now=T + 30, into=found)
    assert {k: (t.count, t.oldest) for k, t in found.items()} == {
        ("default", "approval"): (1, 25.0)
    }
