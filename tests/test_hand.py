"""The ready messages in a dispatcher's hand (services/dispatcher/hand.py)."""

from __future__ import annotations

from heddle.services.dispatcher.hand import RECENT_FOR, WARY_AFTER_RECONNECT, Hand

KEY = ("r1", "a", 1, 0)
OTHER = ("r1", "b", 1, 0)


def test_a_first_copy_is_held_and_not_checked():
    hand = Hand()
    assert hand.take(KEY, 100.0) is False
    assert KEY in hand and OTHER not in hand


def test_a_copy_soon_after_the_last_is_checked_and_later_not():
    hand = Hand()
    hand.take(KEY, 100.0)
    hand.drop(KEY, 101.0)
    assert KEY not in hand
    assert hand.take(KEY, 101.0 + RECENT_FOR - 0.1) is True
    hand.drop(KEY, 102.0)
    assert hand.take(KEY, 102.0 + RECENT_FOR + 0.1) is False


def test_expired_attempts_are_forgotten_in_order():
    hand = Hand()
    hand.take(KEY, 0.0)
    hand.drop(KEY, 0.0)
    hand.take(OTHER, 5.0)
    hand.drop(OTHER, 5.0)
    # KEY expired, OTHER not yet: only OTHER is checked.
    assert hand.take(KEY, RECENT_FOR + 1.0) is False
    assert hand.take(OTHER, RECENT_FOR + 1.0) is True


def test_every_message_is_checked_for_a_while_after_a_reconnect():
    hand = Hand()
    hand.reconnected(50.0)
    assert hand.take(KEY, 50.0 + WARY_AFTER_RECONNECT - 0.1) is True
    assert hand.take(OTHER, 50.0 + WARY_AFTER_RECONNECT + 0.1) is False


def test_held_since_the_last_touch_and_waits_since_the_first():
    hand = Hand()
    hand.take(KEY, 10.0)
    hand.take(OTHER, 12.0)
    assert hand.held_since_touch(KEY, 13.0) == 3.0
    hand.touch(KEY, 12.5)
    assert hand.held_since_touch(KEY, 13.0) == 0.5
    assert sorted(hand.waits(13.0)) == [1.0, 3.0]  # the touch does not reset the wait
    hand.drop(KEY, 14.0)
    hand.touch(KEY, 14.5)  # no longer in hand: nothing is kept for it
    assert hand.waits(15.0) == (3.0,)
