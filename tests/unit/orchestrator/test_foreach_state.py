"""Loops in the run's state machine (services/orchestrator/loops.py): a forEach step's
expansion into instances, maxParallel over a sequence of finishes, an instance's failure,
an empty list, a list past the cap, an evaluation error, the outputs gathered, and the same
after a rebuild from the stored records (mid-expansion and mid-loop). No I/O.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from heddle.services.orchestrator.decisions import Enqueue, PersistRun, PersistStep
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.wire.contracts import AttemptRecord, StepSpec, SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import (
    POLICY,
    RUN,
    T0,
    cancel,
    finish_step,
    made,
    rebuilt,
    spec,
    statuses,
)


def new(
    *steps: StepSpec, params: dict[str, str] | None = None, policy: Policy = POLICY
) -> tuple[RunState, list]:
    cmd = SubmitRun(run_id=RUN, submitted_at=from_epoch(T0), steps=list(steps), params=params or {})
    return made(cmd, policy)


def stored(record: Any) -> Any:
    """A record as it reads back from KV."""
    return msgspec.json.decode(msgspec.json.encode(record), type=type(record))


def queued(state: RunState) -> list[str]:
    return [sid for sid, s in state.steps.items() if s.status == "queued"]


def enqueued(effects: list) -> list[str]:
    return [e.ready.step_id for e in effects if isinstance(e, Enqueue)]


def test_a_literal_list_expands_into_instances_with_their_items() -> None:
    state, effects = new(spec("region", for_each="['eu', 'us', 3]"))
    assert statuses(state) == {
        "region": "running",
        "region[0]": "queued",
        "region[1]": "queued",
        "region[2]": "queued",
    }
    ready = {e.ready.step_id: e.ready for e in effects if isinstance(e, Enqueue)}
    assert ready["region[0]"].env["HEDDLE_ITEM"] == "eu"
    assert ready["region[1]"].env["HEDDLE_ITEM_INDEX"] == "1"
    assert ready["region[2]"].env["HEDDLE_ITEM"] == "3"
    assert ready["region[0]"].command == "echo region"
    assert state.run.step_count == 4
    assert state.steps["region[1]"].parent == "region"


def test_instances_are_stored_before_the_run_and_their_step() -> None:
    state, _ = new(spec("a"), spec("loop", ("a",), for_each="['x', 'y', 'z']", max_parallel=1))
    effects = finish_step(state, "a")
    order = [
        e.step.id if isinstance(e, PersistStep) else type(e).__name__
        for e in effects
        if isinstance(e, PersistStep | PersistRun | Enqueue)
    ]
    loop_at = order.index("loop")
    assert order.index("PersistRun") < loop_at
    for inst in ("loop[0]", "loop[1]", "loop[2]"):
        assert order.index(inst) < order.index("PersistRun")
    assert order.index("Enqueue", loop_at) > loop_at  # no ready message before the step's record


def test_max_parallel_is_respected_over_a_sequence_of_finishes() -> None:
    state, _ = new(spec("loop", for_each="[1, 2, 3, 4, 5]", max_parallel=2))
    assert queued(state) == ["loop[0]", "loop[1]"]
    seen = []
    for _ in range(5):
        now = queued(state)
        assert len(now) <= 2
        seen.append(now[0])
        finish_step(state, now[0])
    assert seen == [f"loop[{k}]" for k in range(5)]
    assert state.steps["loop"].status == "succeeded"
    assert state.run.status == "succeeded"


def test_an_instance_retries_in_its_place() -> None:
    state, _ = new(spec("loop", for_each="['a', 'b']", max_parallel=1, retries=1))
    finish_step(state, "loop[0]", "failed")
    assert state.steps["loop[0]"].status == "retrying"
    assert state.steps["loop[1]"].status == "pending"
    state.on_retry_due("loop[0]", 2, T0 + 3)
    assert queued(state) == ["loop[0]"]


def test_an_instance_that_fails_fails_its_step_and_skips_the_rest() -> None:
    state, _ = new(spec("loop", for_each="[1, 2, 3, 4]", max_parallel=2), spec("after", ("loop",)))
    finish_step(state, "loop[0]", "failed")
    assert statuses(state) == {
        "loop": "failed",
        "after": "skipped",
        "loop[0]": "failed",
        "loop[1]": "queued",
        "loop[2]": "skipped",
        "loop[3]": "skipped",
    }
    assert "loop[0]" in (state.steps["loop"].reason or "")
    assert state.run.status == "running"  # loop[1] still runs
    finish_step(state, "loop[1]")
    assert state.run.status == "failed"


def test_an_empty_list_succeeds_with_no_instances() -> None:
    state, _ = new(spec("loop", for_each="[]"), spec("after", ("loop",)))
    assert statuses(state) == {"loop": "succeeded", "after": "queued"}
    assert state.steps["loop"].instances == 0


def test_a_list_past_the_cap_fails_its_step_with_the_count() -> None:
    policy = Policy(retry_base=1.0, retry_cap=300.0, default_timeout=900.0, max_items=3)
    state, _ = new(spec("loop", for_each="[1, 2, 3, 4, 5]"), policy=policy)
    assert statuses(state) == {"loop": "failed"}
    assert "5 items" in (state.steps["loop"].reason or "")
    assert state.run.status == "failed"


def test_an_evaluation_error_fails_its_step() -> None:
    state, _ = new(spec("a"), spec("loop", ("a",), for_each="steps.a.outputs.files"))
    finish_step(state, "a", outputs={"files": "not json"})
    loop = state.steps["loop"]
    assert loop.status == "failed"
    assert (loop.reason or "").startswith("forEach gives string")


def test_an_upstream_output_gives_the_list_and_outputs_are_gathered() -> None:
    state, _ = new(
        spec("list"),
        spec("each", ("list",), for_each="steps.list.outputs.files"),
        spec("sum", ("each",), when="steps.each.outputs.n == '[\"1\",null]'"),
    )
    finish_step(state, "list", outputs={"files": '["a.csv","b.csv"]'})
    assert state.steps["each[1]"].item == "b.csv"
    finish_step(state, "each[0]", outputs={"n": "1"})
    assert state.steps["each"].status == "running"
    effects = finish_step(state, "each[1]")
    assert json.loads(state.steps["each"].outputs["n"]) == ["1", None]
    assert state.steps["sum"].status == "queued"  # the condition saw the gathered outputs
    [ready] = [e.ready for e in effects if isinstance(e, Enqueue)]
    assert ready.env["HEDDLE_OUT_EACH_N"] == '["1",null]'


def test_a_cancel_ends_the_loop() -> None:
    state, _ = new(spec("loop", for_each="[1, 2, 3]", max_parallel=1))
    cancel(state)
    assert state.steps["loop"].status == "cancelled"
    assert state.steps["loop[2]"].status == "cancelled"


def test_a_rebuilt_run_expands_again_a_step_whose_record_was_not_stored() -> None:
    state, _ = new(spec("a"), spec("loop", ("a",), for_each="['x', 'y', 'z']", max_parallel=2))
    before = rebuilt(state)  # the step's record as it was stored before its expansion
    finish_step(state, "a")
    # Stored: a's success and the instances' records; not the step's, nor the run's.
    kept = [state.steps["a"], before.steps["loop"]]
    kept += [state.steps[f"loop[{k}]"] for k in range(3)]
    again = RunState(stored(before.run), [stored(s) for s in kept], POLICY)
    assert again.steps["loop"].status == "pending"
    assert "loop[0]" not in again.steps  # left out until expanded again
    effects = again.resume(T0 + 10)
    assert sorted(enqueued(effects)) == ["loop[0]", "loop[1]"]
    assert statuses(again)["loop"] == "running"
    assert again.run.step_count == 5


def test_a_rebuilt_run_carries_on_mid_loop() -> None:
    state, _ = new(spec("loop", for_each="[1, 2, 3, 4]", max_parallel=2))
    finish_step(state, "loop[0]")
    # Stored: loop[0]'s success, not loop[2]'s queueing (the crash fell between).
    again = rebuilt(state)
    again.steps["loop[2]"].status = "pending"
    again = rebuilt(again)
    effects = again.resume(T0 + 10)
    assert sorted(enqueued(effects)) == ["loop[1]", "loop[2]"]
    for sid in ("loop[1]", "loop[2]", "loop[3]"):
        if again.steps[sid].status != "queued":
            again.resume(T0 + 11)
        finish_step(again, sid)
    assert again.steps["loop"].status == "succeeded"
    assert again.run.status == "succeeded"


def test_a_rebuilt_run_ends_a_loop_whose_last_instance_was_stored_alone() -> None:
    state, _ = new(spec("loop", for_each="[1]"), spec("after", ("loop",)))
    finish_step(state, "loop[0]", outputs={"k": "v"})
    again = rebuilt(state)
    again.steps["loop"].status = "running"
    again.steps["after"].status = "pending"
    again = rebuilt(again)
    again.resume(T0 + 10)
    assert again.steps["loop"].status == "succeeded"
    assert again.steps["loop"].outputs == {"k": '["v"]'}
    assert again.steps["after"].status == "queued"


def test_a_watchdog_verdict_about_a_loop_is_ignored() -> None:
    state, _ = new(spec("loop", for_each="[1, 2]"))
    assert state.on_silent("loop", 0, "runner unknown silent", T0 + 4)[0].step_id == "loop"
    assert state.steps["loop"].status == "running"
    assert state.steps["loop[0]"].status == "queued"


def test_a_loop_carried_over_by_a_retry_keeps_its_gathered_outputs() -> None:
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[spec("each", for_each="[1, 2]"), spec("after", ("each",))],
        retry_of="run-0",
        carried={"each": AttemptRecord(attempt=0, outputs={"k": '["a","b"]'})},
    )
    state, effects = RunState.new(cmd, POLICY, T0, rand=lambda: 0.5, tickets=lambda: "t")
    assert statuses(state) == {"each": "succeeded", "after": "queued"}
    [ready] = [e.ready for e in effects if isinstance(e, Enqueue)]
    assert ready.env["HEDDLE_OUT_EACH_K"] == '["a","b"]'


def test_a_loop_in_a_chain_with_handoff_and_continuations() -> None:
    policy = Policy(retry_base=1.0, retry_cap=300.0, handoff=True, continuations=True)
    state, effects = new(
        spec("a"),
        spec("loop", ("a",), for_each="[1, 2]"),
        spec("after", ("loop",)),
        policy=policy,
    )
    # a's ready message carries no continuation: its successor is a loop, which never runs.
    [ready] = [e.ready for e in effects if isinstance(e, Enqueue)]
    assert ready.then is None
    effects = finish_step(state, "a")
    assert sorted(enqueued(effects)) == ["loop[0]", "loop[1]"]
    finish_step(state, "loop[0]")
    finish_step(state, "loop[1]")
    assert statuses(state)["after"] == "queued"


def test_past_the_deadline_a_loop_is_stopped_and_its_exit_handler_runs() -> None:
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[spec("each", for_each="['a', 'b', 'c']", max_parallel=1)],
        on_exit=[spec("report")],
        timeout_seconds=60,
    )
    state, _ = RunState.new(cmd, POLICY, T0)
    finish_step(state, "each[0]")
    assert statuses(state)["each[1]"] == "queued"
    state.on_deadline(T0 + 61)
    assert statuses(state) == {
        "each": "cancelled",
        "each[0]": "succeeded",
        "each[1]": "cancelled",
        "each[2]": "cancelled",
        "report": "queued",
    }
    finish_step(state, "report")
    assert state.run.status == "failed"
