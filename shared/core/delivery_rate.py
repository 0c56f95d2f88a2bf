"""How many deliveries a webhook takes (HEDDLE_WEBHOOK_RATE a minute, per hook, per
gateway): a token bucket per hook, full at the start, so that a burst of a minute's worth
goes through and then one more each ``60 / rate`` seconds. Pure: the time is given."""

from __future__ import annotations

from dataclasses import dataclass, field

MINUTE = 60.0
MAX_BUCKETS = 10_000  # hooks tracked at once; the full ones are forgotten first


@dataclass(slots=True)
class Bucket:
    tokens: float
    at: float  # when ``tokens`` was counted


@dataclass(slots=True)
class DeliveryRate:
    """Each hook's bucket, by key (its workflow's stored name and its name)."""

    per_minute: int
    buckets: dict[str, Bucket] = field(default_factory=dict)

    def take(self, key: str, now: float) -> float | None:
        """Take one delivery for ``key`` at ``now`` (seconds, monotonic): None if it may go,
        else the seconds until it could (a Retry-After)."""
        capacity = float(self.per_minute)
        bucket = self.buckets.get(key)
        if bucket is None:
            if len(self.buckets) >= MAX_BUCKETS:
                self._forget_full(now)
            bucket = self.buckets[key] = Bucket(capacity, now)
        refill = self.per_minute / MINUTE
        bucket.tokens = min(capacity, bucket.tokens + max(0.0, now - bucket.at) * refill)
        bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return (1.0 - bucket.tokens) / refill

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have refilled (a new one would be the same); if none has,
        the oldest, so that memory stays bounded whatever the keys."""
        refill = self.per_minute / MINUTE
        full = [
            key
            for key, b in self.buckets.items()
            if b.tokens + (now - b.at) * refill >= self.per_minute
        ]
        for key in full or [min(self.buckets, key=lambda k: self.buckets[k].at)]:
            del self.buckets[key]
