"""Retry backoff: exponential, capped, jittered to a uniform point in its upper half."""

from __future__ import annotations

import random
from collections.abc import Callable


def backoff_bounds(failed_attempt: int, base: float, cap: float) -> tuple[float, float]:
    """The (low, high) seconds to wait after attempt ``failed_attempt`` (counting from 1)."""
    if failed_attempt < 1:
        raise ValueError(f"attempts count from 1, got {failed_attempt}")
    # 2 ** 1023 is the largest power a float holds; the cap is reached far earlier.
    full = min(base * 2.0 ** min(failed_attempt - 1, 1000), cap)
    return full / 2, full


def backoff(
    failed_attempt: int, base: float, cap: float, rand: Callable[[], float] = random.random
) -> float:
    low, high = backoff_bounds(failed_attempt, base, cap)
    return low + rand() * (high - low)
