"""The watchdog's verdicts, pure: silence by receipt time, outages, the backstop deadline."""

from __future__ import annotations

from heddle.services.orchestrator.state import Policy, RunState
from heddle.services.orchestrator.watchdog import DEADLINE_SLACK, HeartbeatView
from heddle.shared.wire.contracts import Heartbeat, StepSpec, StepStarted, SubmitRun

LIMIT, KILL_GRACE = 0.6, 1.0


def running_state(timeout: float = 100.0) -> RunState:
    cmd = SubmitRun(
        run_id="r",
        submitted_at="2026-01-01T00:00:00Z",
        steps=[StepSpec(id="s", command="x", timeout_seconds=timeout)],
    )
    state, _ = RunState.new(cmd, Policy(), now=0.0)
    state.on_started(
        StepStarted(
            run_id="r", step_id="s", attempt=1, runner="w", pid=1, started_at="2026-01-01T00:00:00Z"
        ),
        now=0.0,
    )
    return state


def beat(attempt: int = 1, runner: str = "w") -> Heartbeat:
    return Heartbeat(runner=runner, run_id="r", step_id="s", attempt=attempt, seq=1)


def view(now: float = 0.0) -> HeartbeatView:
    v = HeartbeatView(LIMIT, KILL_GRACE)
    v.grace_from = now
    return v


def test_fresh_heartbeats_keep_a_step_alive() -> None:
    v, state = view(), running_state()
    for t in (0.5, 1.0, 1.5, 2.0):
        v.record(beat(), stored_at=1e9, now=t)
        assert v.verdicts(state, {"s": 0.0}, now=t + LIMIT - 0.01) == []


def test_silence_past_the_limit_is_one_verdict_naming_the_runner() -> None:
    v, state = view(), running_state()
    v.record(beat(), stored_at=1e9, now=1.0)
    [verdict] = v.verdicts(state, {"s": 0.0}, now=1.0 + LIMIT + 0.05)
    assert (verdict.step_id, verdict.attempt) == ("s", 1)
    assert verdict.reason == "runner w silent for 0.6 s"
    assert v.verdicts(state, {"s": 0.0}, now=5.0) == []  # given once


def test_heartbeat_of_an_older_attempt_does_not_count() -> None:
    v, state = view(), running_state()
    v.record(beat(attempt=0), stored_at=1e9, now=10.0)
    assert len(v.verdicts(state, {"s": 0.0}, now=LIMIT + 0.1)) == 1


def test_no_verdict_while_disconnected_and_a_full_grace_after() -> None:
    v, state = view(), running_state()
    v.record(beat(), stored_at=1e9, now=1.0)
    v.disconnected()
    assert v.verdicts(state, {"s": 0.0}, now=30.0) == []
    v.reconnected(now=30.0)
    assert v.verdicts(state, {"s": 0.0}, now=30.0 + LIMIT - 0.01) == []
    assert len(v.verdicts(state, {"s": 0.0}, now=30.0 + LIMIT + 0.01)) == 1


def test_start_of_the_view_counts_as_a_heartbeat() -> None:
    v, state = view(now=100.0), running_state()  # e.g. just restarted
    assert v.verdicts(state, {"s": 0.0}, now=100.0 + LIMIT - 0.01) == []


def test_backstop_deadline_fails_a_runner_that_beats_but_never_reports() -> None:
    timeout = 2.0
    v, state = view(), running_state(timeout)
    deadline = timeout + KILL_GRACE + DEADLINE_SLACK
    v.record(beat(), stored_at=1e9, now=deadline - 0.1)
    assert v.verdicts(state, {"s": 0.0}, now=deadline - 0.05) == []
    v.record(beat(), stored_at=1e9, now=deadline + 0.05)
    [verdict] = v.verdicts(state, {"s": 0.0}, now=deadline + 0.1)
    assert verdict.reason == "timed out after 2 s (runner w did not report)"


def test_accepted_but_never_started_is_judged_by_its_heartbeat() -> None:
    cmd = SubmitRun(
        run_id="r", submitted_at="2026-01-01T00:00:00Z", steps=[StepSpec(id="s", command="x")]
    )
    state, _ = RunState.new(cmd, Policy(), now=0.0)  # s is queued, attempt 1
    v = view()
    assert v.verdicts(state, {}, now=50.0) == []  # queued, nobody holds it: waits
    v.record(beat(runner="w2"), stored_at=1e9, now=50.0)
    assert v.verdicts(state, {}, now=50.0 + LIMIT - 0.01) == []
    [verdict] = v.verdicts(state, {}, now=50.0 + LIMIT + 0.01)
    assert verdict.reason.startswith("runner w2 silent")


def test_a_withdrawn_verdict_is_given_again_once() -> None:
    v, state = view(), running_state()
    [verdict] = v.verdicts(state, {"s": 0.0}, now=LIMIT + 0.1)
    v.withdraw("r", verdict.step_id, verdict.attempt)  # its outcome could not be read
    assert len(v.verdicts(state, {"s": 0.0}, now=LIMIT + 0.2)) == 1
    assert v.verdicts(state, {"s": 0.0}, now=LIMIT + 0.3) == []
