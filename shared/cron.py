"""Cron expressions and slots: pure functions over croniter and zoneinfo. No I/O, no clock:
callers pass the times, so tests drive the clock."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter


def schedule_problem(expr: object) -> str | None:
    """Why ``expr`` is not a standard 5-field cron expression, or None if it is."""
    if not isinstance(expr, str):
        return "schedule must be a string"
    if len(expr.split()) != 5:
        return f"schedule {expr!r} must have 5 fields (minute hour day month weekday)"
    if not croniter.is_valid(expr):
        return f"schedule {expr!r} is not a valid cron expression"
    try:
        croniter(expr, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except (CroniterBadDateError, ValueError):
        return f"schedule {expr!r} can never fire (no such date)"
    return None


def timezone_problem(tz: object) -> str | None:
    if not isinstance(tz, str):
        return "timezone must be a string"
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown timezone {tz!r} (use an IANA name such as Europe/Paris)"
    return None


def slots_between(
    expr: str, tz: str | None, after: datetime, until: datetime, limit: int
) -> list[datetime]:
    """Slot times strictly after ``after`` and at or before ``until``, oldest first, at most
    ``limit`` of them. Times are timezone-aware; slots are computed in ``tz`` (UTC default)."""
    zone = ZoneInfo(tz or "UTC")
    it = croniter(expr, after.astimezone(zone))
    # When clocks go back, a wall time occurs twice. As in cron, a job pinned to an hour
    # runs once then; one that runs every hour runs in each hour that elapses.
    every_hour = expr.split()[1] == "*"
    out: list[datetime] = []
    while len(out) < limit:
        slot = it.get_next(datetime)
        if slot > until:
            break
        if not every_hour and out and slot.replace(tzinfo=None) == out[-1].replace(tzinfo=None):
            continue
        out.append(slot)
    return out
