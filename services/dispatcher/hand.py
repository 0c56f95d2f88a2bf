"""The ready messages in one dispatcher's hand: since when each is held, when it was last
touched, and which attempts it held lately. Pure: no I/O; times are monotonic seconds.

A second copy of an attempt in hand is not offered (it comes back, if ever, once the first is
placed); one held lately, or any after a reconnect, is checked first (``must_check``): a
broker restart or a re-sent ready message can bring an attempt a runner already has.
"""

from __future__ import annotations

from collections import OrderedDict

AttemptKey = tuple[str, str, int, int]  # run, step, attempt, requeue
# A second copy of an attempt this dispatcher holds or placed this recently is checked
# before it is offered (two copies after a broker restart, a re-sent ready message).
RECENT_FOR = 10.0
# After a reconnect every ready message is checked, not only redelivered ones: a broker
# killed mid-flight can forget a consumer's deliveries, and what it sends again then comes
# as a first delivery, though a runner may have run it already.
WARY_AFTER_RECONNECT = 20.0


class Hand:
    def __init__(self) -> None:
        self._since: dict[AttemptKey, float] = {}  # first in hand (the autoscaler's waits)
        self._touched: dict[AttemptKey, float] = {}  # its delivery or last touch
        self._recent: OrderedDict[AttemptKey, float] = OrderedDict()  # -> expiry
        self._wary_until = 0.0

    def __contains__(self, key: AttemptKey) -> bool:
        return key in self._since

    def take(self, key: AttemptKey, now: float) -> bool:
        """Hold ``key`` from ``now``; whether it must be checked before it is offered (held
        lately, or just after a reconnect)."""
        while self._recent and next(iter(self._recent.values())) < now:
            self._recent.popitem(last=False)
        self._since[key] = self._touched[key] = now
        return now < self._wary_until or key in self._recent

    def touch(self, key: AttemptKey, now: float) -> None:
        if key in self._since:
            self._touched[key] = now

    def held_since_touch(self, key: AttemptKey, now: float) -> float:
        return now - self._touched.get(key, 0.0)

    def drop(self, key: AttemptKey, now: float) -> None:
        """No longer in hand (placed, given back or left): a copy soon after is checked."""
        self._since.pop(key, None)
        self._touched.pop(key, None)
        self._recent[key] = now + RECENT_FOR
        self._recent.move_to_end(key)

    def reconnected(self, now: float) -> None:
        self._wary_until = now + WARY_AFTER_RECONNECT

    def waits(self, now: float) -> tuple[float, ...]:
        """Seconds each message in hand has been held."""
        return tuple(now - since for since in self._since.values())

    def held(self, now: float) -> dict[AttemptKey, float]:
        """Seconds each message in hand has been held, by its attempt."""
        return {key: now - since for key, since in self._since.items()}
