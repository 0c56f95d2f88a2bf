"""Runs under way, bounded: services/orchestrator/admission.py and a waiting run's
transitions in services/orchestrator/state.py (no I/O)."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from heddle.services.cli.render import runs_view
from heddle.services.gateway.handlers.run_events import RunChanges
from heddle.services.orchestrator.admission import Admission
from heddle.services.orchestrator.decisions import Enqueue, PersistRun, PersistStep
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import AttemptRecord, RunRecord, StepSpec, SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import POLICY, RUN, T0, finished, started

DIAMOND = [("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])]


def new(
    admitted: bool,
    steps: list[tuple[str, list[str]]] = DIAMOND,
    carried: dict[str, AttemptRecord] | None = None,
) -> tuple[RunState, list]:
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[StepSpec(id=s, command=f"echo {s}", depends_on=deps) for s, deps in steps],
        retry_of="run-0" if carried else None,
        carried=carried or {},
    )
    counter = itertools.count(1)
    return RunState.new(
        cmd, POLICY, T0, tickets=lambda: f"ticket-{next(counter)}", admitted=admitted
    )


def queued(effects: list) -> list[str]:
    return [e.ready.step_id for e in effects if isinstance(e, Enqueue)]


def statuses(state: RunState) -> dict[str, str]:
    return {s.id: s.status for s in state.steps.values()}


# ---- the bound ----


def test_runs_under_the_bound_are_under_way_at_once_and_the_rest_wait_in_order() -> None:
    adm = Admission(2)
    assert [adm.arrive(r) for r in ("r1", "r2", "r3", "r4")] == [True, True, False, False]
    assert adm.under_way == {"r1", "r2"} and list(adm.waiting) == ["r3", "r4"]
    adm.gone("r2")
    assert adm.due() == ["r3"]
    adm.gone("r1")
    assert adm.due() == ["r4"]
    adm.gone("r3")
    adm.gone("r4")
    assert adm.due() == [] and not adm.under_way and not adm.waiting


def test_a_new_run_waits_behind_those_waiting_even_when_a_place_is_free() -> None:
    adm = Admission(1)
    assert adm.arrive("r1") and not adm.arrive("r2")
    adm.under_way.discard("r1")  # a place free, r2 not yet told: r3 does not pass it
    assert not adm.arrive("r3")
    assert adm.due() == ["r2"]


def test_a_waiting_run_that_ends_gives_no_place_and_leaves_the_line() -> None:
    adm = Admission(1)
    for r in ("r1", "r2", "r3"):
        adm.arrive(r)
    adm.gone("r2")  # cancelled while waiting
    assert adm.due() == []
    adm.gone("r1")
    assert adm.due() == ["r3"]


def test_no_bound_puts_every_run_under_way() -> None:
    adm = Admission(0)
    assert all(adm.arrive(f"r{i}") for i in range(1000))
    assert not adm.waiting and adm.due() == []


def test_recovered_runs_under_way_stay_so_past_the_bound_and_waiting_ones_keep_their_order() -> (
    None
):
    adm = Admission(2)
    adm.arrive("live")
    for run_id, waiting in (("u1", False), ("u2", False), ("w1", True), ("w2", True)):
        adm.recovered(run_id, waiting)
    assert adm.under_way == {"live", "u1", "u2"} and adm.due() == []
    adm.gone("u1")
    assert adm.due() == []  # still two under way
    adm.gone("u2")
    assert adm.due() == ["w1"]
    adm.gone("live")
    assert adm.due() == ["w2"]


@pytest.mark.parametrize("bound", [1, 2, 3, 5])
def test_never_more_under_way_than_the_bound_and_every_run_gets_its_turn(bound: int) -> None:
    adm = Admission(bound)
    order: list[str] = []
    for i in range(12):
        if adm.arrive(f"r{i}"):
            order.append(f"r{i}")
    while adm.under_way:
        assert len(adm.under_way) <= bound
        adm.gone(min(adm.under_way, key=lambda r: int(r[1:])))
        order.extend(adm.due())
    assert order == [f"r{i}" for i in range(12)]


# ---- priority: the highest first, then the first come ----


def waiting_line(bound: int, arrivals: list[tuple[str, int]]) -> Admission:
    """``bound`` runs under way (u0...), then ``arrivals`` (run, priority) waiting."""
    adm = Admission(bound)
    for i in range(bound):
        assert adm.arrive(f"u{i}")
    for run_id, priority in arrivals:
        assert not adm.arrive(run_id, priority)
    return adm


def admitted_in_turn(adm: Admission) -> list[str]:
    """Every waiting run, as places free one at a time."""
    order: list[str] = []
    while adm.under_way:
        adm.gone(sorted(adm.under_way)[0])
        order.extend(adm.due())
    return order


def test_a_run_of_higher_priority_is_admitted_before_the_older_ones_waiting() -> None:
    adm = waiting_line(1, [("old1", 0), ("old2", 0), ("old3", 0), ("urgent", 10)])
    assert adm.line() == ["urgent", "old1", "old2", "old3"]
    adm.gone("u0")
    assert adm.due() == ["urgent"]
    assert admitted_in_turn(adm) == ["old1", "old2", "old3"]


def test_ties_go_to_the_first_come_and_negatives_after_the_default() -> None:
    arrivals = [("n1", -5), ("z1", 0), ("p1", 3), ("n2", -5), ("z2", 0), ("p2", 3), ("m", -1000)]
    adm = waiting_line(2, arrivals)
    assert admitted_in_turn(adm) == ["p1", "p2", "z1", "z2", "n1", "n2", "m"]


@pytest.mark.parametrize("bound", [1, 2, 3])
def test_every_arrival_order_is_admitted_by_priority_then_age(bound: int) -> None:
    priorities = [1000, 5, 5, 0, 0, -1, -1000]
    for order in itertools.permutations(range(len(priorities))):
        arrivals = [(f"r{i}", priorities[i]) for i in order]
        adm = waiting_line(bound, arrivals)
        expected = [r for r, _ in sorted(arrivals, key=lambda a: -a[1])]  # a stable sort
        assert adm.line() == expected
        assert admitted_in_turn(adm) == expected, order


def test_a_place_freed_goes_to_the_highest_priority_even_among_several_due() -> None:
    adm = waiting_line(3, [("a", 0), ("b", 2), ("c", 1), ("d", 2)])
    for run_id in ("u0", "u1", "u2"):
        adm.gone(run_id)
    assert adm.due() == ["b", "d", "c"]
    assert list(adm.waiting) == ["a"]


def test_a_waiting_run_gone_leaves_the_line_and_one_that_comes_back_queues_anew() -> None:
    adm = waiting_line(1, [("hi", 9), ("lo", 0), ("mid", 5)])
    adm.gone("hi")  # cancelled while waiting
    adm.recovered("hi", waiting=True, priority=1)  # its partition taken back, say
    assert adm.line() == ["mid", "hi", "lo"]
    assert admitted_in_turn(adm) == ["mid", "hi", "lo"]


def test_a_line_of_runs_mostly_cancelled_stays_in_order() -> None:
    adm = waiting_line(1, [(f"r{i}", i % 7) for i in range(500)])
    for i in range(500):
        if i % 10:
            adm.gone(f"r{i}")
    kept = sorted((f"r{i}" for i in range(0, 500, 10)), key=lambda r: -(int(r[1:]) % 7))
    assert adm.line() == kept
    assert admitted_in_turn(adm) == kept


def test_a_rebuild_keeps_the_line_by_priority_then_age() -> None:
    """Rebuilt oldest first (partitions.py): the line is the one before the crash."""
    arrivals = [("w1", 0), ("w2", 7), ("w3", 0), ("w4", 7), ("w5", -3)]
    before = waiting_line(1, arrivals).line()
    adm = Admission(1)
    adm.recovered("u0", waiting=False)
    for run_id, priority in arrivals:  # by createdAt: the order they came
        adm.recovered(run_id, waiting=True, priority=priority)
    assert adm.line() == before == ["w2", "w4", "w1", "w3", "w5"]
    assert not adm.arrive("new", 7)  # a run arriving after the rebuild: behind its peers
    assert admitted_in_turn(adm) == ["w2", "w4", "new", "w1", "w3", "w5"]


def test_no_bound_admits_every_run_whatever_its_priority() -> None:
    adm = Admission(0)
    assert adm.arrive("a", -1000) and adm.arrive("b", 1000)
    assert adm.line() == [] and adm.due() == []


# ---- a waiting run ----


def test_a_waiting_run_is_stored_with_every_step_pending_and_nothing_queued() -> None:
    state, effects = new(admitted=False)
    assert state.run.waiting and state.run.status == "running"
    assert queued(effects) == []
    assert statuses(state) == dict.fromkeys("abcd", "pending")
    assert [type(e) for e in effects] == [PersistStep] * 4 + [PersistRun]
    assert effects[-1].run.waiting


def test_an_admitted_run_queues_its_first_steps_as_a_new_one_would() -> None:
    state, _ = new(admitted=False)
    admitted = state.admit(T0 + 1)
    assert queued(admitted) == ["a"] and not state.run.waiting
    assert isinstance(admitted[-1], PersistRun) and not admitted[-1].run.waiting
    assert state.steps["a"].attempt == 1 and state.steps["a"].status == "queued"
    assert state.admit(T0 + 2) == []  # once
    at_once, first = new(admitted=True)
    assert queued(first) == ["a"] and not at_once.run.waiting
    for event in (started(), finished()):
        event(state)
    assert statuses(state) == {"a": "succeeded", "b": "queued", "c": "queued", "d": "pending"}


def test_a_waiting_run_cancelled_ends_at_once_and_is_never_admitted() -> None:
    state, _ = new(admitted=False)
    effects = state.cancel(T0 + 1)
    assert state.run.status == "cancelled" and state.done
    assert statuses(state) == dict.fromkeys("abcd", "cancelled")
    assert queued(effects) == []
    assert state.admit(T0 + 2) == [] and statuses(state) == dict.fromkeys("abcd", "cancelled")


def test_a_waiting_run_rebuilt_after_a_crash_stays_waiting() -> None:
    waiting, _ = new(admitted=False)
    rebuilt = RunState(waiting.run, list(waiting.steps.values()), POLICY)
    assert queued(rebuilt.resume(T0 + 1)) == []
    assert statuses(rebuilt) == dict.fromkeys("abcd", "pending")
    assert queued(rebuilt.admit(T0 + 2)) == ["a"]
    # Admitted, and crashed before its first step was queued: the rebuild queues it.
    stored, _ = new(admitted=False)
    stored.run.waiting = False
    again = RunState(stored.run, list(stored.steps.values()), POLICY)
    assert queued(again.resume(T0 + 3)) == ["a"]


def test_a_waiting_retry_queues_only_what_its_carried_steps_leave_ready() -> None:
    done = AttemptRecord(attempt=1, runner="r1", finished_at=from_epoch(T0 - 5))
    state, effects = new(admitted=False, carried={"a": done, "b": done})
    assert queued(effects) == []
    assert statuses(state) == {"a": "succeeded", "b": "succeeded", "c": "pending", "d": "pending"}
    assert queued(state.admit(T0 + 1)) == ["c"]


def test_the_command_line_shows_a_waiting_run_as_such() -> None:
    listed = [
        {"runId": "r1", "status": "running", "waiting": True, "createdAt": from_epoch(T0)},
        {"runId": "r2", "status": "running", "waiting": False, "createdAt": from_epoch(T0)},
    ]
    lines = runs_view(listed).splitlines()
    assert "running, waiting" in lines[1] and "waiting" not in lines[2], lines


def test_a_runs_admission_is_news_to_its_followers_and_its_waiting_record_seen_late_is_not() -> (
    None
):
    told = RunChanges()
    waiting = RunRecord(
        run_id=RUN, status="running", created_at=from_epoch(T0), step_count=4, waiting=True
    )
    assert b'"waiting":true' in told.run_changed(waiting)
    admitted = msgspec.structs.replace(waiting, waiting=False)
    assert b'"waiting":false' in told.run_changed(admitted)
    assert told.run_changed(waiting) == b""  # the older record, from the snapshot, after
