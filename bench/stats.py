"""Small statistics: percentiles of samples, and median/min/max over repetitions."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass


def percentile(values: Iterable[float], p: float) -> float | None:
    """The p-th percentile (0-100) by linear interpolation; None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    k = (len(xs) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


@dataclass(frozen=True, slots=True)
class Spread:
    """A figure over repetitions: its median, min and max, and how many values."""

    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Spread | None:
        xs = [v for v in values if v is not None and not math.isnan(v)]
        if not xs:
            return None
        med = percentile(xs, 50)
        assert med is not None
        return cls(med, min(xs), max(xs), len(xs))

    def to_json(self) -> dict[str, float]:
        return {"median": self.median, "min": self.min, "max": self.max, "n": self.n}


@dataclass(frozen=True, slots=True)
class Paired:
    """Two sides measured in alternation, round by round: the median of the per-round
    differences (a - b) with a bootstrap 95% interval, and the share of rounds a was
    faster. Pairing cancels what drifts over minutes on a shared machine."""

    median_diff: float
    low: float
    high: float
    a_faster: float
    n: int


def paired(a: list[float], b: list[float], resamples: int = 2000, seed: int = 1) -> Paired:
    """``a`` and ``b`` measured in the same rounds (same length, at least one)."""
    if len(a) != len(b) or not a:
        raise ValueError("paired samples need the same, non-zero, number of rounds")
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    rng = random.Random(seed)
    medians = sorted(
        percentile(rng.choices(diffs, k=len(diffs)), 50) or 0.0 for _ in range(resamples)
    )
    median = percentile(diffs, 50)
    assert median is not None
    return Paired(
        median_diff=median,
        low=percentile(medians, 2.5) or 0.0,
        high=percentile(medians, 97.5) or 0.0,
        a_faster=sum(d < 0 for d in diffs) / len(diffs),
        n=len(diffs),
    )
