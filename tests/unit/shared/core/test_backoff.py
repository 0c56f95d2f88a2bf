"""shared/core/backoff.py: min(base * 2^(n-1), cap), jittered uniformly into its upper half."""

from __future__ import annotations

import random

import pytest
from heddle.shared.core.backoff import backoff, backoff_bounds

ALMOST_ONE = 0.9999999

# failed attempt -> full delay with base 1 s and cap 300 s
FULL = {1: 1, 2: 2, 3: 4, 4: 8, 5: 16, 6: 32, 7: 64, 8: 128, 9: 256, 10: 300, 11: 300, 12: 300}


@pytest.mark.parametrize(("attempt", "full"), FULL.items())
def test_bounds_double_then_cap(attempt: int, full: float) -> None:
    assert backoff_bounds(attempt, 1.0, 300.0) == (full / 2, full)


@pytest.mark.parametrize(
    ("attempt", "base", "cap", "bounds"),
    [
        (1, 0.5, 10.0, (0.25, 0.5)),
        (3, 0.5, 10.0, (1.0, 2.0)),
        (5, 0.5, 10.0, (4.0, 8.0)),
        (6, 0.5, 10.0, (5.0, 10.0)),
        (1, 5.0, 3.0, (1.5, 3.0)),  # a base above the cap is capped from the first retry
        (2_000, 1.0, 300.0, (150.0, 300.0)),  # no overflow for absurd attempt numbers
        (10**9, 1.0, 300.0, (150.0, 300.0)),
    ],
)
def test_bounds_other_policies(
    attempt: int, base: float, cap: float, bounds: tuple[float, float]
) -> None:
    assert backoff_bounds(attempt, base, cap) == bounds


@pytest.mark.parametrize("attempt", FULL)
def test_jitter_spans_the_upper_half(attempt: int) -> None:
    low, high = backoff_bounds(attempt, 1.0, 300.0)
    assert backoff(attempt, 1.0, 300.0, rand=lambda: 0.0) == low
    top = backoff(attempt, 1.0, 300.0, rand=lambda: ALMOST_ONE)
    assert low < top < high
    assert top == pytest.approx(high, rel=1e-6)
    assert backoff(attempt, 1.0, 300.0, rand=lambda: 0.5) == pytest.approx((low + high) / 2)


def test_rand_is_drawn_once_per_delay() -> None:
    calls = []

    def rand() -> float:
        calls.append(1)
        return 0.25

    assert backoff(3, 1.0, 300.0, rand=rand) == 2.0 + 0.25 * 2.0
    assert len(calls) == 1


def test_seeded_delays_stay_in_bounds_and_spread() -> None:
    rng = random.Random(1234)
    delays = [backoff(4, 1.0, 300.0, rand=rng.random) for _ in range(2000)]
    assert all(4.0 <= d <= 8.0 for d in delays)
    assert min(delays) < 4.1 and max(delays) > 7.9  # uses the whole upper half
    assert sum(d < 6.0 for d in delays) == pytest.approx(1000, abs=100)


@pytest.mark.parametrize("attempt", [0, -1, -100])
def test_attempts_count_from_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="count from 1"):
        backoff_bounds(attempt, 1.0, 300.0)
    with pytest.raises(ValueError):
        backoff(attempt, 1.0, 300.0, rand=lambda: 0.5)
