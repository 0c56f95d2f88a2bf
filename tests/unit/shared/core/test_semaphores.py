"""Every change to a semaphore's document (shared/core/semaphores.py)."""

from __future__ import annotations

import pytest
from heddle.shared.core.semaphores import (
    due,
    free_slots,
    give_back,
    holds,
    name_problem,
    over,
    reconcile,
    resize,
    size_problem,
    stale_holders,
    take,
)
from heddle.shared.core.step_checks import Limits
from heddle.shared.core.validation import workflow_problems
from heddle.shared.wire.contracts import Semaphore, SemaphoreHolder


def who(step: str, run: str = "r1", attempt: int = 1) -> SemaphoreHolder:
    return SemaphoreHolder(run_id=run, step_id=step, attempt=attempt, since="t")


def keys(entries: list[SemaphoreHolder]) -> list[tuple[str, str]]:
    return [(e.run_id, e.step_id) for e in entries]


def test_takes_free_slots_then_waits_in_order() -> None:
    sem = Semaphore(size=2)
    sem, a = take(sem, who("a"))
    sem, b = take(sem, who("b"))
    sem, c = take(sem, who("c"))
    sem, d = take(sem, who("d"))
    assert (a, b, c, d) == (True, True, False, False)
    assert keys(sem.holders) == [("r1", "a"), ("r1", "b")]
    assert keys(sem.waiting) == [("r1", "c"), ("r1", "d")]
    assert sem.waiting[0].attempt == 0  # a waiter holds no attempt yet
    assert free_slots(sem) == 0 and due(sem) == []


def test_taking_again_changes_nothing() -> None:
    sem, _ = take(Semaphore(size=1), who("a"))
    again, granted = take(sem, who("a", attempt=2))
    assert granted and again == sem
    sem, _ = take(sem, who("b"))
    still, granted = take(sem, who("b"))
    assert not granted and still == sem  # waits once, in the same place


def test_a_freed_slot_goes_to_the_first_waiter() -> None:
    sem = Semaphore(size=1)
    for step in ("a", "b", "c"):
        sem, _ = take(sem, who(step))
    sem = give_back(sem, "r1", "a")
    assert keys(due(sem)) == [("r1", "b")]
    sem, late = take(sem, who("c"))
    assert not late  # b is ahead of it
    sem, first = take(sem, who("b"))
    assert first and keys(sem.holders) == [("r1", "b")] and keys(sem.waiting) == [("r1", "c")]


def test_a_newcomer_waits_behind_the_waiting() -> None:
    sem = Semaphore(size=1, holders=[who("a")], waiting=[who("b", attempt=0)])
    sem = give_back(sem, "r1", "a")
    sem, granted = take(sem, who("x", run="r2"))
    assert not granted and keys(sem.waiting) == [("r1", "b"), ("r2", "x")]


def test_give_back_frees_a_slot_and_a_place_and_is_idempotent() -> None:
    sem = Semaphore(size=1, holders=[who("a")], waiting=[who("b", attempt=0)])
    once = give_back(sem, "r1", "a")
    assert once.holders == [] and give_back(once, "r1", "a") == once
    gone = give_back(once, "r1", "b")
    assert gone.waiting == []
    assert give_back(gone, "r2", "a") == gone  # the same step id of another run is not it


def test_a_smaller_size_frees_nothing_early() -> None:
    sem = Semaphore(size=3)
    for step in ("a", "b", "c"):
        sem, _ = take(sem, who(step))
    sem = resize(sem, 1)
    assert len(sem.holders) == 3 and over(sem) == 2 and free_slots(sem) == 0
    sem, granted = take(sem, who("d"))
    assert not granted
    sem = give_back(give_back(sem, "r1", "a"), "r1", "b")
    assert over(sem) == 0 and free_slots(sem) == 0  # c alone fills the one slot
    sem = give_back(sem, "r1", "c")
    assert keys(due(sem)) == [("r1", "d")]


def test_a_larger_size_lets_the_waiting_in() -> None:
    sem = Semaphore(size=1, holders=[who("a")])
    for step in ("b", "c", "d"):
        sem, _ = take(sem, who(step))
    sem = resize(sem, 3)
    assert keys(due(sem)) == [("r1", "b"), ("r1", "c")]
    sem, granted = take(sem, who("c"))
    assert granted  # its turn: within the free slots, though b has not taken yet


def test_reconcile_gives_back_the_stale_and_holds_the_running() -> None:
    sem = Semaphore(
        size=2,
        holders=[who("ended"), who("runs"), who("theirs", run="r9")],
        waiting=[who("gone", attempt=0), who("waits", attempt=0), who("other", run="r9")],
    )
    mine = {"r1", "r2"}.__contains__
    fixed = reconcile(
        sem,
        mine,
        holding={("r1", "runs"), ("r2", "queued")},
        waiting={("r1", "waits")},
        must_hold=[who("runs"), who("queued", run="r2")],
    )
    assert keys(fixed.holders) == [("r1", "runs"), ("r9", "theirs"), ("r2", "queued")]
    assert keys(fixed.waiting) == [("r1", "waits"), ("r9", "other")]
    assert over(fixed) == 1  # a running step holds its slot whatever the size
    assert reconcile(fixed, mine, {("r1", "runs"), ("r2", "queued")}, {("r1", "waits")}, []) == (
        fixed
    )


def test_reconcile_drops_a_waiter_that_holds_already() -> None:
    sem = Semaphore(size=1, waiting=[who("a", attempt=0)])
    fixed = reconcile(sem, lambda _: True, {("r1", "a")}, {("r1", "a")}, [who("a")])
    assert keys(fixed.holders) == [("r1", "a")] and fixed.waiting == []


def test_stale_holders() -> None:
    sem = Semaphore(size=3, holders=[who("a"), who("b"), who("c", run="r2")])
    stale = stale_holders(sem, lambda run: run == "r1", {("r1", "a")})
    assert keys(stale) == [("r1", "b")]
    assert holds(sem, "r2", "c") and not holds(sem, "r2", "a")


@pytest.mark.parametrize("name", ["db", "A-b_9", "x" * 64])
def test_good_names(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize("name", ["", "x" * 65, "a.b", "a b", "é", 3, None])
def test_bad_names(name: object) -> None:
    assert name_problem(name) is not None


@pytest.mark.parametrize("size", [0, -1, 1.5, "2", True, None])
def test_bad_sizes(size: object) -> None:
    assert size_problem(size) is not None


def test_sizes() -> None:
    assert size_problem(1) is None and size_problem(1000) is None


def test_workflow_validation_lists_every_semaphore_problem() -> None:
    doc = {
        "steps": [
            {"id": "a", "command": "true", "semaphores": ["db", "bad name", "db", 7]},
            {"id": "b", "command": "true", "semaphores": "db"},
            {"id": "c", "command": "true", "semaphores": ["db", "api"]},
        ]
    }
    problems = {(p.path, p.message) for p in workflow_problems(doc, Limits())}
    paths = sorted(path for path, _ in problems)
    assert paths == [
        "steps[0].semaphores[1]",
        "steps[0].semaphores[2]",
        "steps[0].semaphores[3]",
        "steps[1].semaphores",
    ]
