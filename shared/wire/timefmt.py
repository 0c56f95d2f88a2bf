"""Timestamps as shown to users: RFC 3339, UTC, millisecond precision."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def rfc3339(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_rfc3339() -> str:
    return rfc3339(datetime.now(UTC))


def from_epoch(seconds: float) -> str:
    return rfc3339(datetime.fromtimestamp(seconds, UTC))


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def epoch_of(text: str, default: float) -> float:
    """``text`` (RFC 3339) in epoch seconds; ``default`` if it is not a time."""
    try:
        return parse(text).timestamp()
    except ValueError:
        return default


def epoch() -> float:
    return time.time()
