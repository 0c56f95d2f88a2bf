"""Small statistics: percentiles of samples, and median/min/max over repetitions."""

from __future__ import annotations

import math
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
