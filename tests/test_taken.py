"""Taken (services/runner_agent/taken.py): the attempts a runner took last."""

from __future__ import annotations

from heddle.services.runner_agent.taken import Taken


def test_an_attempt_taken_is_known_and_another_attempt_of_its_step_is_not() -> None:
    taken = Taken()
    taken.add(("r", "s", 1))
    assert ("r", "s", 1) in taken
    assert ("r", "s", 2) not in taken
    assert ("r", "t", 1) not in taken


def test_the_oldest_is_forgotten_first() -> None:
    taken = Taken(kept=3)
    for i in range(1, 5):
        taken.add(("r", "s", i))
    assert len(taken) == 3
    assert ("r", "s", 1) not in taken
    assert all(("r", "s", i) in taken for i in (2, 3, 4))


def test_taking_one_again_makes_it_the_newest() -> None:
    taken = Taken(kept=2)
    taken.add(("r", "a", 1))
    taken.add(("r", "b", 1))
    taken.add(("r", "a", 1))
    taken.add(("r", "c", 1))
    assert ("r", "a", 1) in taken
    assert ("r", "b", 1) not in taken
