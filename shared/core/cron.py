"""Cron expressions and slots: pure functions over croniter and zoneinfo. No I/O, no clock:
callers pass the times, so tests drive the clock."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadDateError, croniter
from heddle.shared.core.cron_fields import fields_problem

SHOWN = 100  # characters of a bad value repeated in a message


def _shown(text: str) -> str:
    return repr(text if len(text) <= SHOWN else f"{text[:SHOWN]}...")


NOT_ZONES = frozenset({"localtime", "Factory"})


@cache
def _zones() -> frozenset[str]:
    # Read once: ZoneInfo(name) opens a file under the name, so a directory ("Europe") or a
    # name too long for the file system fails there with an OSError of its own.
    # Not zones: this machine's own (it differs from host to host) and tzdata's placeholder.
    return frozenset(available_timezones()) - NOT_ZONES


def schedule_problem(expr: object) -> str | None:
    """Why ``expr`` is not a standard 5-field cron expression, or None if it is."""
    if not isinstance(expr, str):
        return "schedule must be a string"
    problem = fields_problem(expr)
    if problem is not None:
        return f"schedule {_shown(expr)} is not a valid cron expression: {problem}"
    if not croniter.is_valid(expr):  # what croniter refuses beyond the fields' grammar
        return f"schedule {expr!r} is not a valid cron expression"
    try:
        croniter(expr, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except (CroniterBadDateError, ValueError):
        return f"schedule {expr!r} can never fire (no such date)"
    return None


def timezone_problem(tz: object) -> str | None:
    if not isinstance(tz, str):
        return "timezone must be a string"
    if tz not in _zones():
        return f"unknown timezone {_shown(tz)} (use an IANA name such as Europe/Paris)"
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
