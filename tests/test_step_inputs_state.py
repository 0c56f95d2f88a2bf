"""The state machine gives each ready step its variables: parameters, slot, static env, and
the outputs of the steps upstream (the succeeded attempt's only). Pure, no I/O."""

from __future__ import annotations

import itertools

import msgspec
from heddle.services.orchestrator.decisions import Enqueue
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.wire.contracts import StepFinished, StepRecord, StepSpec, SubmitRun
from heddle.shared.wire.timefmt import from_epoch

T0 = 1_700_000_000.0
POLICY = Policy(retry_base=1.0, retry_cap=300.0, default_timeout=900.0)


def new(steps: list[StepSpec], policy: Policy = POLICY, **run: object) -> tuple[RunState, list]:
    cmd = SubmitRun(run_id="r", submitted_at=from_epoch(T0), steps=steps, **run)  # type: ignore[arg-type]
    counter = itertools.count(1)
    return RunState.new(cmd, policy, T0, rand=lambda: 0.5, tickets=lambda: f"t{next(counter)}")


def ready_env(effects: list) -> dict[str, dict[str, str]]:
    return {e.ready.step_id: e.ready.env for e in effects if isinstance(e, Enqueue)}


def finish(state: RunState, step: str, outcome: str = "succeeded", **outputs: str) -> list:
    s = state.steps[step]
    ev = StepFinished(
        run_id="r",
        step_id=step,
        attempt=s.attempt,
        runner="r1",
        ticket=s.ticket,
        outcome=outcome,  # type: ignore[arg-type]
        finished_at=from_epoch(T0 + 1),
        exit_code=0 if outcome == "succeeded" else 1,
        started_at=from_epoch(T0),
        pid=1,
        outputs=outputs,
    )
    return state.on_finished(ev, T0 + 1)


CHAIN = [
    StepSpec(id="a", command="x"),
    StepSpec(id="b", command="x", depends_on=["a"], env={"ONLY_B": "1", "SHARED": "b"}),
    StepSpec(id="c", command="x", depends_on=["b"]),
]


def test_params_slot_and_static_env_reach_every_step() -> None:
    state, effects = new(
        CHAIN,
        params={"region": "eu"},
        env={"SHARED": "run"},
        scheduled_for="2025-01-01T06:00:00.000Z",
        scheduled_tz="Europe/Paris",
    )
    base = {
        "SHARED": "run",
        "HEDDLE_PARAM_REGION": "eu",
        "HEDDLE_SCHEDULED_FOR": "2025-01-01T06:00:00.000Z",
        "HEDDLE_SCHEDULED_TZ": "Europe/Paris",
    }
    assert ready_env(effects) == {"a": base}
    assert ready_env(finish(state, "a")) == {"b": {**base, "ONLY_B": "1", "SHARED": "b"}}
    assert ready_env(finish(state, "b")) == {"c": base}
    assert state.run.params == {"region": "eu"} and state.run.scheduled_tz == "Europe/Paris"
    # A run with none of these sends no variables at all.
    assert ready_env(new(CHAIN)[1]) == {"a": {}}


def test_outputs_reach_every_step_downstream_directly_or_not() -> None:
    state, _ = new([*CHAIN, StepSpec(id="d", command="x")])
    assert ready_env(finish(state, "a", tag="v1", multi="x\ny")) == {
        "b": {
            "ONLY_B": "1",
            "SHARED": "b",
            "HEDDLE_OUT_A_TAG": "v1",
            "HEDDLE_OUT_A_MULTI": "x\ny",
        }
    }
    assert state.steps["a"].outputs == {"tag": "v1", "multi": "x\ny"}
    assert state.steps["a"].attempts[-1].outputs == {"tag": "v1", "multi": "x\ny"}
    env = ready_env(finish(state, "b", n="2"))["c"]
    assert env == {"HEDDLE_OUT_A_TAG": "v1", "HEDDLE_OUT_A_MULTI": "x\ny", "HEDDLE_OUT_B_N": "2"}
    # d is not downstream of a.
    assert ready_env(finish(state, "d", z="1")) == {}
    assert "HEDDLE_OUT_D_Z" not in env


def test_a_failed_attempt_passes_no_outputs_on() -> None:
    steps = [
        StepSpec(id="a", command="x", retries=1),
        StepSpec(id="b", command="x", depends_on=["a"]),
    ]
    state, _ = new(steps)
    # Attempt 1 wrote outputs and failed: a runner sends none then, and none are kept if sent.
    finish(state, "a", "failed", tag="from-the-failure")
    assert state.steps["a"].status == "retrying" and state.steps["a"].outputs == {}
    assert state.steps["a"].attempts[0].outputs == {}
    state.on_retry_due("a", 2, T0 + 5)
    assert ready_env(finish(state, "a")) == {"b": {}}


def test_a_step_rebuilt_after_a_restart_gets_the_same_variables() -> None:
    state, _ = new(CHAIN, params={"p": "1"})
    finish(state, "a", tag="v1")
    stored = [msgspec.json.encode(s) for s in state.steps.values()]
    records = [msgspec.json.decode(raw, type=StepRecord) for raw in stored]
    rebuilt = RunState(state.run, records, POLICY)
    assert ready_env(rebuilt.resume(T0 + 2)) == {
        "b": {
            "ONLY_B": "1",
            "SHARED": "b",
            "HEDDLE_PARAM_P": "1",
            "HEDDLE_OUT_A_TAG": "v1",
        }
    }


def test_a_step_whose_variables_outgrow_a_message_fails_with_the_reason() -> None:
    state, _ = new(CHAIN, policy=Policy(max_ready_bytes=4096))
    effects = finish(state, "a", big="x" * 5000)
    assert ready_env(effects) == {}
    b, c = state.steps["b"], state.steps["c"]
    assert b.status == "failed" and "ready message about" in (b.reason or "")
    assert "accepts up to 4096" in (b.reason or "") and b.attempts[-1].reason == b.reason
    assert c.status == "skipped" and state.run.status == "failed"
