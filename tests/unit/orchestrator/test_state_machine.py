"""services/orchestrator/state.py: every step and run transition, table-driven, no I/O."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest
from heddle.services.orchestrator.decisions import (
    Enqueue,
    Ignored,
    KillAttempt,
    PersistRun,
    PersistStep,
    Requeued,
    ScheduleRetry,
)
from heddle.services.orchestrator.notes import transition_notes
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.core.backoff import backoff_bounds
from heddle.shared.wire.contracts import StepFinished, StepSpec, StepStarted, SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import (
    RUN,
    T0,
    Event,
    accepted,
    cancel,
    finished,
    lost,
    make,
    retry_due,
    silent,
    started,
)


def bag(effects: list) -> list[str]:
    """Effect kinds with multiplicity; the order they are carried out in is the actor's concern."""
    return sorted(type(e).__name__ for e in effects)


def snapshot(state: RunState) -> bytes:
    return msgspec.json.encode([state.run, sorted(state.steps.values(), key=lambda s: s.id)])


def a_then_b(retries: int) -> list[tuple[str, list[str], int]]:
    """a -> b: b shows what a's success or failure does downstream."""
    return [("a", [], retries), ("b", ["a"], 0)]


FAIL_A = [started(), finished(outcome="failed")]
PS, PR, EQ, SR, KA, IG, RQ = (
    "PersistStep",
    "PersistRun",
    "Enqueue",
    "ScheduleRetry",
    "KillAttempt",
    "Ignored",
    "Requeued",
)

TRANSITIONS = [
    # name, retries of a, events before, event, effects, then (a status, a attempt, b, run)
    ("queued-started", 0, [], started(), [PS], ("running", 1, "pending", "running")),
    (
        "running-succeeded",
        0,
        [started()],
        finished(),
        [PS, PS, EQ],
        ("succeeded", 1, "queued", "running"),
    ),
    (
        "queued-succeeded-start-lost",
        0,
        [],
        finished(),
        [PS, PS, EQ],
        ("succeeded", 1, "queued", "running"),
    ),
    (
        "running-failed-retries-left",
        2,
        [started()],
        finished(outcome="failed"),
        [PS, SR],
        ("retrying", 1, "pending", "running"),
    ),
    (
        "running-timed-out-retries-left",
        1,
        [started()],
        finished(outcome="timed_out"),
        [PS, SR],
        ("retrying", 1, "pending", "running"),
    ),
    (
        "running-failed-no-retries",
        0,
        [started()],
        finished(outcome="failed"),
        [PS, PS, PR],
        ("failed", 1, "skipped", "failed"),
    ),
    (
        "last-retry-failed",
        1,
        [*FAIL_A, retry_due(attempt=2), started(attempt=2)],
        finished(outcome="failed", attempt=2),
        [PS, PS, PR],
        ("failed", 2, "skipped", "failed"),
    ),
    (
        "retrying-retry-due",
        2,
        FAIL_A,
        retry_due(attempt=2),
        [PS, EQ],
        ("queued", 2, "pending", "running"),
    ),
    (
        "retrying-retry-due-wrong-attempt",
        2,
        FAIL_A,
        retry_due(attempt=3),
        [IG],
        ("retrying", 1, "pending", "running"),
    ),
    (
        "retrying-retry-due-same-attempt",
        2,
        FAIL_A,
        retry_due(attempt=1),
        [IG],
        ("retrying", 1, "pending", "running"),
    ),
    (
        "running-silent-retries-left",
        1,
        [started()],
        silent(),
        [KA, PS, EQ],
        ("queued", 2, "pending", "running"),
    ),
    ("queued-silent-retries-left", 1, [], silent(), [PS, EQ], ("queued", 2, "pending", "running")),
    (
        "accepted-silent-retries-left",
        1,
        [accepted()],
        silent(),
        [KA, PS, EQ],
        ("queued", 2, "pending", "running"),
    ),
    (
        "running-silent-no-retries",
        0,
        [started()],
        silent(),
        [KA, PS, PS, PR],
        ("failed", 1, "skipped", "failed"),
    ),
    ("queued-lost", 0, [], lost(), [EQ, PS, RQ], ("queued", 1, "pending", "running")),
    (
        "queued-lost-again",
        0,
        [lost()],
        lost(requeue=1),
        [EQ, PS, RQ],
        ("queued", 1, "pending", "running"),
    ),
    ("queued-lost-stale-finding", 0, [lost()], lost(), [IG], ("queued", 1, "pending", "running")),
    ("accepted-lost", 0, [accepted()], lost(), [IG], ("queued", 1, "pending", "running")),
    ("running-lost", 0, [started()], lost(), [IG], ("running", 1, "pending", "running")),
    (
        "lost-then-runs",
        0,
        [lost(), started()],
        finished(),
        [PS, PS, EQ],
        ("succeeded", 1, "queued", "running"),
    ),
    ("queued-cancel", 0, [], cancel, [PR, PS, PS, PR], ("cancelled", 1, "cancelled", "cancelled")),
    (
        "accepted-cancel",
        0,
        [accepted()],
        cancel,
        [PR, KA, PS, PS, PR],
        ("cancelled", 1, "cancelled", "cancelled"),
    ),
    (
        "retrying-cancel",
        2,
        FAIL_A,
        cancel,
        [PR, PS, PS, PR],
        ("cancelled", 1, "cancelled", "cancelled"),
    ),
    (
        "running-cancel",
        0,
        [started()],
        cancel,
        [PR, KA, PS],
        ("running", 1, "cancelled", "running"),
    ),
    (
        "cancelled-running-succeeds-anyway",
        0,
        [started(), cancel],
        finished(),
        [PS, PR],
        ("succeeded", 1, "cancelled", "cancelled"),
    ),
    (
        "cancel-after-run-ended",
        0,
        [started(), finished(), finished("b")],
        cancel,
        [],
        ("succeeded", 1, "succeeded", "succeeded"),
    ),
    (
        "cancelled-running-finishes",
        0,
        [started(), cancel],
        finished(outcome="cancelled"),
        [PS, PR],
        ("cancelled", 1, "cancelled", "cancelled"),
    ),
    (
        "cancelled-running-fails-with-retries",
        3,
        [started(), cancel],
        finished(outcome="failed"),
        [PS, PR],
        ("cancelled", 1, "cancelled", "cancelled"),
    ),
    (
        "cancelled-running-goes-silent",
        3,
        [started(), cancel],
        silent(),
        [KA, PS, PR],
        ("cancelled", 1, "cancelled", "cancelled"),
    ),
    ("cancel-twice", 0, [started(), cancel], cancel, [], ("running", 1, "cancelled", "running")),
    (
        "running-duplicate-started",
        0,
        [started()],
        started(),
        [IG],
        ("running", 1, "pending", "running"),
    ),
    (
        "started-after-cancel-requested",
        0,
        [accepted(), cancel],
        started(),
        [IG, KA],
        ("cancelled", 1, "cancelled", "cancelled"),
    ),
]


@pytest.mark.parametrize(
    ("retries", "before", "event", "effects", "after"),
    [t[1:] for t in TRANSITIONS],
    ids=[t[0] for t in TRANSITIONS],
)
def test_transition_table(
    retries: int,
    before: list[Event],
    event: Event,
    effects: list[str],
    after: tuple[str, int, str, str],
) -> None:
    state, _ = make(a_then_b(retries))
    for ev in before:
        ev(state)
    out = event(state)
    a, b = state.steps["a"], state.steps["b"]
    assert (a.status, a.attempt, b.status, state.run.status) == after
    assert bag(out) == sorted(effects)


def test_new_run_queues_roots_and_leaves_the_rest_pending() -> None:
    state, effects = make([("a", [], 0), ("b", ["a"], 0), ("c", [], 1)])
    assert bag(effects) == [EQ, EQ, PR, PS, PS, PS]
    assert [e.ready.step_id for e in effects if isinstance(e, Enqueue)] == ["a", "c"]
    assert {(e.step.id, e.step.status) for e in effects if isinstance(e, PersistStep)} == {
        ("a", "queued"),
        ("b", "pending"),
        ("c", "queued"),
    }
    ready = next(e.ready for e in effects if isinstance(e, Enqueue))
    assert (ready.run_id, ready.attempt, ready.command) == (RUN, 1, "echo a")
    assert ready.timeout_seconds == 900.0 and ready.ready_at == from_epoch(T0)
    assert state.run.status == "running" and state.run.step_count == 3


def test_children_queue_only_when_every_parent_succeeded() -> None:
    state, _ = make([("a", [], 0), ("b", [], 0), ("c", ["a", "b"], 0), ("d", ["a"], 0)])
    out = finished("a")(state)
    assert [e.ready.step_id for e in out if isinstance(e, Enqueue)] == ["d"]
    assert state.steps["c"].status == "pending"
    out = finished("b")(state)
    assert [(e.ready.step_id, e.ready.attempt) for e in out if isinstance(e, Enqueue)] == [("c", 1)]
    assert state.steps["c"].status == "queued"


def test_a_step_with_no_dependencies_opens_its_run_however_often_it_is_queued() -> None:
    """Steps of runs under way go before steps that open a run (docs/bursts.md): a
    step opens its run when it depends on nothing, on its first attempt, a retry, a requeue
    or a restart's re-send alike."""
    state, effects = make([("a", [], 1), ("b", ["a"], 1)])
    assert [(e.ready.step_id, e.opens) for e in effects if isinstance(e, Enqueue)] == [("a", True)]
    assert [(e.ready.step_id, e.opens) for e in lost()(state) if isinstance(e, Enqueue)] == [
        ("a", True)
    ]
    assert [e.opens for e in state.resume(T0 + 1) if isinstance(e, Enqueue)] == [True]
    out = finished("a")(state)
    assert [(e.ready.step_id, e.opens) for e in out if isinstance(e, Enqueue)] == [("b", False)]
    out = finished("b", outcome="failed")(state)
    retried = state.on_retry_due("b", 2, T0 + 9)
    assert [(e.ready.attempt, e.opens) for e in retried if isinstance(e, Enqueue)] == [(2, False)]


@pytest.mark.parametrize("rand", [0.0, 0.5, 0.999999])
@pytest.mark.parametrize("failed_attempt", [1, 2, 3, 4])
def test_retry_delay_is_inside_backoff_bounds(failed_attempt: int, rand: float) -> None:
    policy = Policy(retry_base=2.0, retry_cap=10.0)
    state, _ = make([("a", [], 10)], rand=rand, policy=policy)
    for n in range(1, failed_attempt):
        finished(outcome="failed", attempt=n)(state)
        retry_due(attempt=n + 1)(state)
    out = finished(outcome="failed", attempt=failed_attempt)(state)
    [retry] = [e for e in out if isinstance(e, ScheduleRetry)]
    low, high = backoff_bounds(failed_attempt, 2.0, 10.0)
    assert low <= retry.delay <= high
    assert retry.delay == pytest.approx(low + rand * (high - low))
    assert (retry.step_id, retry.attempt, retry.at) == (
        "a",
        failed_attempt + 1,
        T0 + 2 + retry.delay,
    )
    assert state.steps["a"].retry_at == from_epoch(T0 + 2 + retry.delay)


def test_failure_skips_everything_downstream_breadth_first() -> None:
    state, _ = make(
        [
            ("a", [], 0),
            ("b", ["a"], 0),
            ("c", ["b"], 0),
            ("d", ["a"], 0),
            ("e", [], 0),
            ("f", ["c", "e"], 0),
        ]
    )
    started()(state)
    out = finished(outcome="failed")(state)
    persisted = [(e.step.id, e.step.status) for e in out if isinstance(e, PersistStep)]
    assert persisted == [
        ("a", "failed"),
        ("b", "skipped"),
        ("d", "skipped"),
        ("c", "skipped"),
        ("f", "skipped"),
    ]
    for sid in "bcdf":
        assert state.steps[sid].reason == "skipped because step a failed"
    assert state.steps["a"].reason == "exit code 1"
    assert state.steps["e"].status == "queued" and state.run.status == "running"
    out = finished("e")(state)
    assert state.run.status == "failed" and PR in bag(out)
    assert not [e for e in out if isinstance(e, Enqueue)]


def test_run_succeeds_only_when_every_step_succeeded() -> None:
    state, _ = make([("a", [], 0), ("b", ["a"], 0)])
    finished("a")(state)
    assert state.run.status == "running" and state.run.finished_at is None
    out = finished("b")(state)
    assert (state.run.status, state.run.finished_at) == ("succeeded", from_epoch(T0 + 2))
    assert [e.run.status for e in out if isinstance(e, PersistRun)] == ["succeeded"]


def test_cancel_kills_the_runner_holding_the_attempt() -> None:
    state, _ = make([("a", [], 0), ("b", [], 0)])
    started("a", runner="r7")(state)
    accepted("b", runner="r8")(state)
    out = cancel(state)
    kills = [(k.runner, k.step_id, k.attempt, k.reason) for k in out if isinstance(k, KillAttempt)]
    assert kills == [("r7", "a", 1, "cancelled"), ("r8", "b", 1, "cancelled")]
    assert cancel(state) == [] and state.run.cancel_requested


def test_watchdog_fences_the_old_runner_and_requeues_without_backoff() -> None:
    state, _ = make([("a", [], 2)])
    started(runner="r1")(state)
    out = silent()(state)
    assert KillAttempt("r1", "a", 1, "runner went silent") in out
    assert not [e for e in out if isinstance(e, ScheduleRetry)]
    [enqueue] = [e for e in out if isinstance(e, Enqueue)]
    assert enqueue.ready.attempt == 2 and enqueue.ready.ready_at == from_epoch(T0 + 4)
    assert state.steps["a"].runner is None
    assert state.steps["a"].attempts[0].reason == "runner went silent"


def test_watchdog_verdict_on_a_retry_never_started_is_kept_in_attempts() -> None:
    state, _ = make([("a", [], 2)])
    silent(attempt=1)(state)  # attempt 1 never started
    silent(attempt=2)(state)  # nor did attempt 2
    history = [(r.attempt, r.reason) for r in state.steps["a"].attempts]
    assert history == [(1, "runner went silent"), (2, "runner went silent")]


def test_on_accepted_only_records_the_current_queued_attempt() -> None:
    state, _ = make([("a", [], 0), ("b", ["a"], 0)])
    accepted(attempt=2, runner="rx")(state)
    accepted("b", attempt=1, runner="ry")(state)
    assert state.steps["a"].runner is None and state.steps["b"].runner is None
    accepted(runner="r1")(state)
    assert state.steps["a"].runner == "r1"


def test_a_heartbeat_is_stored_with_the_next_record_and_names_the_runner() -> None:
    state, _ = make([("a", [], 0)])
    assert state.on_heartbeat("a", 1, "r1", from_epoch(T0 + 1)) == []  # no write of its own
    assert state.steps["a"].runner == "r1"
    [persist] = [e for e in started("a", runner="r1")(state) if isinstance(e, PersistStep)]
    assert persist.step.last_heartbeat_at == from_epoch(T0 + 1)


def test_an_outcome_without_a_started_event_carries_the_start() -> None:
    # A step that ended within the runner's report delay: queued -> succeeded in one event.
    state, _ = make([("a", [], 1)])
    ev = StepFinished(
        run_id=RUN,
        step_id="a",
        attempt=1,
        runner="r1",
        ticket=state.steps["a"].ticket,
        outcome="failed",
        finished_at=from_epoch(T0 + 2),
        exit_code=3,
        started_at=from_epoch(T0 + 1),
        pid=77,
    )
    state.on_finished(ev, T0 + 2)
    step = state.steps["a"]
    assert step.status == "retrying" and step.started_at == from_epoch(T0 + 1)
    [rec] = step.attempts
    assert (rec.runner, rec.pid, rec.started_at, rec.exit_code) == ("r1", 77, ev.started_at, 3)
    # The retry's outcome has its own start; the first attempt keeps its record.
    state.on_retry_due("a", 2, T0 + 3)
    assert step.started_at is None
    second = msgspec.structs.replace(
        ev, attempt=2, ticket=step.ticket, outcome="succeeded", pid=78, exit_code=0
    )
    state.on_finished(second, T0 + 4)
    assert step.status == "succeeded" and [r.pid for r in step.attempts] == [77, 78]


# ---- terminal is final; stale and foreign events change nothing ----------------------------

OLD = [started(attempt=1), finished(attempt=1), finished("a", "failed", 1), silent(attempt=1)]
FOREIGN = [started(runner="r9"), finished(runner="r9"), finished("a", "failed", runner="r9")]


def every_event(step: str, attempt: int) -> list[Event]:
    return [
        started(step, attempt),
        finished(step, "succeeded", attempt),
        finished(step, "failed", attempt),
        finished(step, "cancelled", attempt),
        retry_due(step, attempt),
        retry_due(step, attempt + 1),
        silent(step, attempt),
        lost(step, attempt),
        accepted(step, attempt),
    ]


# (name, retries of a, events before, step the events target, events that must change nothing)
FINAL = [
    ("succeeded", 0, [started(), finished()], "a", every_event("a", 1)),
    ("failed", 0, FAIL_A, "a", every_event("a", 1)),
    ("skipped", 0, FAIL_A, "b", every_event("b", 0) + every_event("b", 1)),
    ("cancelled", 0, [accepted(), cancel], "a", every_event("a", 1)),
    ("cancelled-pending", 0, [cancel], "b", every_event("b", 0) + every_event("b", 1)),
    (
        "older-attempt-while-attempt-2-runs",
        3,
        [*FAIL_A, retry_due(attempt=2), started(attempt=2, runner="r2")],
        "a",
        OLD,
    ),
    ("older-attempt-after-watchdog", 3, [started(), silent()], "a", OLD),
    ("other-runner-while-running", 3, [started()], "a", FOREIGN),
    ("other-runner-after-accept", 3, [accepted()], "a", FOREIGN),
    (
        "events-while-retrying",
        3,
        FAIL_A,
        "a",
        [started(), finished(), silent(), started(attempt=2), finished(attempt=2)],
    ),
    ("unknown-step", 0, [], "zzz", every_event("zzz", 1)),
]
CASES = [
    (name, r, before, target, i, ev)
    for name, r, before, target, evs in FINAL
    for i, ev in enumerate(evs)
]


@pytest.mark.parametrize(
    ("retries", "before", "target", "index", "event"),
    [c[1:] for c in CASES],
    ids=[f"{c[0]}-{c[4]}" for c in CASES],
)
def test_final_stale_and_foreign_events_are_ignored_and_change_nothing(
    retries: int, before: list[Event], target: str, index: int, event: Event
) -> None:
    state, _ = make(a_then_b(retries))
    for ev in before:
        ev(state)
    snap = snapshot(state)
    out = event(state)
    assert snapshot(state) == snap  # every StepRecord and the RunRecord are unchanged
    assert all(isinstance(e, Ignored | KillAttempt) for e in out), out
    assert all(e.step_id == target for e in out)
    if index % 9 != 8:  # on_accepted returns no effects at all
        assert any(isinstance(e, Ignored) for e in out), out


def test_late_start_of_a_superseded_attempt_is_fenced() -> None:
    state, _ = make([("a", [], 3)])
    accepted(runner="r1")(state)
    silent()(state)
    out = started(attempt=1, runner="r1")(state)
    assert bag(out) == ["Ignored", "KillAttempt"]
    [kill] = [e for e in out if isinstance(e, KillAttempt)]
    assert (kill.runner, kill.step_id, kill.attempt) == ("r1", "a", 1)


def test_a_lost_attempt_is_queued_again_under_a_new_message_id_and_not_counted() -> None:
    state, _ = make([("a", [], 0)])
    first = lost()(state)
    second = lost(requeue=1)(state)
    readies = [e.ready for e in first + second if isinstance(e, Enqueue)]
    assert [(r.attempt, r.requeue) for r in readies] == [(1, 1), (1, 2)]
    assert [e.requeue for e in first + second if isinstance(e, Requeued)] == [1, 2]
    a = state.steps["a"]
    assert (a.status, a.attempt, a.requeues, a.retries, a.attempts) == ("queued", 1, 2, 0, [])
    # A restart re-sends the requeued message, not the lost one.
    [again] = [e.ready for e in state.resume(T0 + 9) if isinstance(e, Enqueue)]
    assert (again.attempt, again.requeue) == (1, 2)


def test_a_retry_starts_with_no_requeues() -> None:
    state, _ = make([("a", [], 1)])
    lost()(state)
    silent()(state)  # a runner took the requeued attempt, then died
    a = state.steps["a"]
    assert (a.status, a.attempt, a.requeues) == ("queued", 2, 0)


# ---- tickets: only the runner given an attempt speaks for it ----------------------------


def test_each_attempt_gets_a_ticket_that_its_ready_message_carries() -> None:
    state, effects = make([("a", [], 1)])
    [ready] = [e.ready for e in effects if isinstance(e, Enqueue)]
    assert ready.ticket == state.steps["a"].ticket == "ticket-1"
    started()(state)
    effects = finished(outcome="failed")(state) + retry_due()(state)
    [retry] = [e.ready for e in effects if isinstance(e, Enqueue)]
    assert (retry.attempt, retry.ticket) == (2, "ticket-2")


@pytest.mark.parametrize("event", [started, finished], ids=["started", "finished"])
def test_an_event_with_another_ticket_changes_nothing(event: Callable[..., Event]) -> None:
    """A runner that was not given the attempt cannot know its ticket: its started or
    finished event about it, even under the name of the runner that holds it, is ignored."""
    for before in ([], [started(runner="r1")]):
        state, _ = make(a_then_b(0))
        for ev in before:
            ev(state)
        prior = snapshot(state)
        effects = event(runner="r1", ticket="forged")(state)
        assert bag(effects) == [IG] and snapshot(state) == prior


def test_a_forged_outcome_for_a_queued_attempt_does_not_run_its_dependents() -> None:
    state, _ = make(a_then_b(0))
    effects = finished(runner="r2", ticket="guessed")(state)
    assert [type(e) for e in effects] == [Ignored]
    assert (state.steps["a"].status, state.steps["b"].status) == ("queued", "pending")
    finished()(state)  # the real runner's
    assert (state.steps["a"].status, state.steps["b"].status) == ("succeeded", "queued")


def test_a_step_stored_without_a_ticket_accepts_its_runner_as_before() -> None:
    state, _ = make([("a", [], 0)])
    state.steps["a"].ticket = ""  # written by a version without tickets
    finished(ticket="")(state)
    assert state.steps["a"].status == "succeeded"


def test_transition_notes_from_the_state_machine() -> None:
    """The notes the orchestrator derives from a batch of effects (no I/O)."""
    cmd = SubmitRun(
        run_id="r",
        submitted_at=from_epoch(T0),
        steps=[
            StepSpec(id="a", command="x"),
            StepSpec(id="b", command="x"),
            StepSpec(id="c", command="x", depends_on=["a"]),
        ],
    )
    state, _ = RunState.new(cmd, Policy(), T0)
    for step in "ab":
        state.on_started(
            StepStarted(
                run_id="r",
                step_id=step,
                attempt=1,
                runner=f"r{step}",
                ticket=state.steps[step].ticket,
                pid=1,
                started_at=from_epoch(T0),
            ),
            T0,
        )
    silent = state.on_silent("a", 1, "runner ra silent for 3.1 s", T0 + 5)
    assert [(n.step_id, n.attempt, n.text) for n in transition_notes(silent)] == [
        ("a", 1, "killed by the watchdog: runner ra silent for 3.1 s"),
        ("a", 1, "failed: runner ra silent for 3.1 s (attempt 1 of 1, none left)"),
        ("c", 0, "skipped because step a failed"),
    ]
    cancel = state.cancel(T0 + 6)
    assert [(n.step_id, n.attempt, n.text) for n in transition_notes(cancel)] == [
        ("b", 1, "cancel requested: asking runner rb to kill attempt 1")
    ]
