"""The idle runners by turn (turns.py), pure."""

from __future__ import annotations

from heddle.services.dispatcher.turns import Turns


def turns_of(*names: str) -> Turns:
    turns = Turns()
    for name in names:
        turns.join(name)
        turns.settle(name, idle=True)
    return turns


def test_idle_runners_are_listed_least_recently_used_first() -> None:
    turns = turns_of("a", "b", "c")
    assert list(turns) == ["a", "b", "c"]
    turns.used("a")  # given a step: no longer idle, and last in turn
    assert list(turns) == ["b", "c"]
    assert not turns.idle("a") and turns.idle("b")
    turns.used("b")
    turns.settle("b", idle=True)  # b's step ended first: back in its turn, after c ...
    turns.settle("a", idle=True)  # ... and a before it, though it came back later
    assert list(turns) == ["c", "a", "b"]
    assert turns.idle_count() == 3


def test_settling_twice_changes_nothing() -> None:
    turns = turns_of("a", "b")
    turns.settle("a", idle=True)
    assert list(turns) == ["a", "b"]
    turns.settle("a", idle=False)
    turns.settle("a", idle=False)
    assert list(turns) == ["b"]
    turns.settle("a", idle=True)
    assert list(turns) == ["a", "b"]


def test_a_runner_that_left_is_neither_listed_nor_settled() -> None:
    turns = turns_of("a", "b")
    turns.leave("a")
    assert not turns.idle("a") and list(turns) == ["b"]
    turns.settle("a", idle=True)
    turns.used("a")
    assert list(turns) == ["b"]
    turns.join("a")  # registered again: last in turn, idle once settled
    assert list(turns) == ["b"]
    turns.settle("a", idle=True)
    assert list(turns) == ["b", "a"]


def test_joining_again_keeps_the_turn() -> None:
    turns = turns_of("a", "b")
    turns.join("a")  # a registry refresh of a known runner
    assert list(turns) == ["a", "b"]
