"""Whom a dispatcher asks again after an offer went unanswered, pure."""

from __future__ import annotations

from heddle.services.dispatcher.unanswered import Unanswered

LIMIT = 6.0  # the silence limit


def test_nobody_is_asked_again_before_an_offer_went_unanswered() -> None:
    assert Unanswered().ask_again(0.0, LIMIT) == ""


def test_the_silent_runner_is_asked_at_least_once_more_then_within_the_silence_limit() -> None:
    silent = Unanswered()
    silent.went("r1", offered_at=10.0)
    assert silent.ask_again(30.0, LIMIT) == "r1"  # once more, however late
    silent.went("r1", offered_at=30.0)  # the same runner again: still timed from 10
    assert silent.ask_again(30.0, LIMIT) == ""
    assert silent.runner == ""
    silent.went("r1", offered_at=40.0)
    assert [silent.ask_again(t, LIMIT) for t in (41.0, 45.9, 46.0)] == ["r1", "r1", ""]


def test_another_runner_that_went_silent_is_timed_afresh() -> None:
    silent = Unanswered()
    silent.went("r1", offered_at=0.0)
    assert silent.ask_again(1.0, LIMIT) == "r1"
    silent.went("r2", offered_at=5.0)
    assert [silent.ask_again(t, LIMIT) for t in (20.0, 20.0)] == ["r2", ""]


def test_an_unanswered_handoff_names_the_runner_to_ask_first() -> None:
    silent = Unanswered("r1", since=3.0)
    assert silent.ask_again(100.0, LIMIT) == "r1"
    assert silent.ask_again(100.0, LIMIT) == ""


def test_a_runner_that_answered_or_cannot_be_reached_is_not_asked_again() -> None:
    silent = Unanswered()
    silent.went("r1", offered_at=0.0)
    silent.clear()
    assert silent.ask_again(0.5, LIMIT) == ""
