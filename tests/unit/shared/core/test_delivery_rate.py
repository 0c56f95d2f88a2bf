"""The token bucket that bounds each webhook's deliveries (shared/core/delivery_rate.py)."""

from __future__ import annotations

import pytest
from heddle.shared.core import delivery_rate
from heddle.shared.core.delivery_rate import DeliveryRate


def test_a_minutes_worth_at_once_then_one_each_interval() -> None:
    rate = DeliveryRate(per_minute=3)
    assert [rate.take("w.push", 100.0) for _ in range(3)] == [None, None, None]
    wait = rate.take("w.push", 100.0)
    assert wait == 20.0  # one comes back each 60 / 3 seconds
    assert rate.take("w.push", 110.0) == 10.0  # refused ones take nothing
    assert rate.take("w.push", 120.0) is None
    assert rate.take("w.push", 120.0) == 20.0


def test_each_hook_has_its_own_bucket_and_a_bucket_refills_only_to_full() -> None:
    rate = DeliveryRate(per_minute=1)
    assert rate.take("a", 0.0) is None
    assert rate.take("b", 0.0) is None
    assert rate.take("a", 1.0) is not None
    assert rate.take("a", 3600.0) is None  # an hour idle gives one, not sixty
    assert rate.take("a", 3600.0) is not None


def test_memory_stays_bounded_whatever_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery_rate, "MAX_BUCKETS", 3)
    rate = DeliveryRate(per_minute=1)
    for i in range(5):
        assert rate.take(f"k{i}", float(i)) is None
    assert len(rate.buckets) <= 3
    # The newest hooks, which spent their delivery, are not forgotten while empty.
    assert rate.take("k4", 4.5) is not None
    assert rate.take("k3", 4.5) is not None
    # A full bucket is forgotten first: it would be made the same again.
    rate.take("k9", 1000.0)
    assert "k4" not in rate.buckets and "k9" in rate.buckets
