"""bench/stats.py: percentiles, spreads and paired comparisons (pure)."""

from __future__ import annotations

import pytest

from bench.stats import Spread, paired, percentile


def test_percentile_interpolates_and_spread_skips_missing() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([4.0, 1.0, 3.0, 2.0], 25) == 1.75
    spread = Spread.of([None, 2.0, float("nan"), 1.0, 3.0])
    assert spread == Spread(2.0, 1.0, 3.0, 3)
    assert Spread.of([None]) is None


def test_paired_reads_a_steady_difference_through_drift() -> None:
    # b is 2 slower than a in every round, while both drift by 10 over the rounds: the
    # sides' own spreads overlap, the paired difference does not.
    a = [10.0 + i * 0.1 + (i % 3) * 0.01 for i in range(100)]
    b = [x + 2.0 + (i % 5) * 0.1 for i, x in enumerate(a)]
    result = paired(a, b)
    assert result.n == 100 and result.a_faster == 1.0
    assert result.median_diff == pytest.approx(-2.2)
    assert result.low <= result.median_diff <= result.high < 0
    same = paired(a, a)
    assert (same.median_diff, same.low, same.high, same.a_faster) == (0.0, 0.0, 0.0, 0.0)


def test_paired_needs_rounds_of_both() -> None:
    with pytest.raises(ValueError):
        paired([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        paired([], [])
