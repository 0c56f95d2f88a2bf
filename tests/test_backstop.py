"""services/orchestrator/backstop.py: which queued attempts are lost, and when (no I/O:
the one read it needs, a run's ready steps, is a plain function here)."""

from __future__ import annotations

from heddle.services.orchestrator.backstop import Backstop, Finding, LostAttempts
from heddle.services.orchestrator.notes import transition_notes
from heddle.services.orchestrator.state import Policy, RunState
from heddle.services.orchestrator.watchdog import Beat
from heddle.shared.wire.contracts import StepSpec, SubmitRun
from heddle.shared.wire.timefmt import from_epoch

T0 = 1_700_000_000.0
P = 10.0  # the period: a silence limit


def run(run_id: str = "r", steps: str = "ab") -> RunState:
    cmd = SubmitRun(
        run_id=run_id,
        submitted_at=from_epoch(T0),
        steps=[StepSpec(id=s, command="true") for s in steps],
    )
    state, _ = RunState.new(cmd, Policy(), T0)
    return state


def beat(attempt: int = 1) -> Beat:
    return Beat(attempt=attempt, runner="r1", received=0.0, stored_at=T0)


def test_a_step_is_a_candidate_once_it_was_queued_and_unheld_for_a_period() -> None:
    state, t = run(), LostAttempts(P)
    assert t.candidates(state, {}, 0.0) == []
    assert t.candidates(state, {}, P - 0.1) == []
    assert t.candidates(state, {}, P) == ["a", "b"]


def test_a_heartbeat_of_the_attempt_or_a_known_runner_keeps_a_step_out() -> None:
    state, t = run(), LostAttempts(P)
    state.on_accepted("b", 1, "r2")
    for now in (0.0, P, 3 * P):
        assert t.candidates(state, {"a": beat()}, now) == []
    # A heartbeat of an older attempt does not hold the current one.
    state.steps["a"].attempt = 2
    t.candidates(state, {"a": beat(1)}, 4 * P)
    assert t.candidates(state, {"a": beat(1)}, 5 * P) == ["a"]


def test_missing_at_two_checks_in_a_row_is_lost_and_present_in_between_is_not() -> None:
    state, t = run(), LostAttempts(P)
    t.candidates(state, {}, 0.0)
    assert t.lost("r", t.candidates(state, {}, P), ready={"b"}) == []  # a: first miss
    assert t.lost("r", t.candidates(state, {}, 2 * P), ready={"a", "b"}) == []  # a back
    assert t.lost("r", t.candidates(state, {}, 3 * P), ready={"b"}) == []  # first miss again
    [(step, seen)] = t.lost("r", t.candidates(state, {}, 4 * P), ready={"b"})
    assert (step, seen.attempt, seen.requeues) == ("a", 1, 0)


def test_a_requeue_or_a_new_attempt_starts_the_clock_again() -> None:
    state, t = run("r", "a"), LostAttempts(P)
    t.candidates(state, {}, 0.0)
    t.lost("r", t.candidates(state, {}, P), ready=set())
    state.on_lost("a", 1, 0, T0)
    assert t.candidates(state, {}, 2 * P) == []
    assert t.lost("r", t.candidates(state, {}, 3 * P), ready=set()) == []
    [(_, seen)] = t.lost("r", t.candidates(state, {}, 4 * P), ready=set())
    assert (seen.attempt, seen.requeues) == (1, 1)


def test_steps_not_queued_are_forgotten_and_reset_starts_over() -> None:
    state, t = run("r", "a"), LostAttempts(P)
    t.candidates(state, {}, 0.0)
    state.steps["a"].status = "running"
    assert t.candidates(state, {}, P) == []
    state.steps["a"].status = "queued"
    assert t.candidates(state, {}, 2 * P) == []  # seen afresh
    t.reset()
    assert t.candidates(state, {}, 3 * P) == []
    assert t.candidates(state, {}, 4 * P) == ["a"]


async def test_check_reads_each_run_with_candidates_once_and_skips_an_unknown_answer() -> None:
    asked: list[str] = []
    answers: dict[str, set[str] | None] = {"r1": set(), "r2": None}

    async def ready_steps(run_id: str) -> set[str] | None:
        asked.append(run_id)
        return answers[run_id]

    backstop = Backstop(P, ready_steps)
    states = [run("r1", "a"), run("r2", "a"), run("r3", "a")]
    states[2].on_accepted("a", 1, "r9")  # held: r3 is never read
    assert await backstop.check(states, {}, 0.0) == []
    assert asked == []
    assert await backstop.check(states, {}, P) == []  # r1 a: first miss; r2: no answer
    assert await backstop.check(states, {}, 2 * P) == [Finding("r1", "a", 1, 0)]
    assert asked == ["r1", "r2", "r1", "r2"]
    answers["r2"] = set()
    assert await backstop.check(states, {}, 3 * P) == [Finding("r1", "a", 1, 0)]
    assert await backstop.check(states, {}, 4 * P) == [
        Finding("r1", "a", 1, 0),
        Finding("r2", "a", 1, 0),
    ]


def test_a_requeue_is_one_note_in_the_attempts_log() -> None:
    state = run("r", "a")
    effects = state.on_lost("a", 1, 0, T0 + 1)
    assert [(n.step_id, n.attempt, n.text) for n in transition_notes(effects)] == [
        ("a", 1, "queued again: no runner holds attempt 1 and its ready message is gone")
    ]
