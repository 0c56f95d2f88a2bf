"""Which cron slots a scheduler tick should run: pure planning, no I/O and no clock.

The scheduler keeps one cursor per workflow: every slot at or before it is handled. A tick
plans the slots after the cursor and at or before now, minus the slots that fell while the
schedule was paused, at most ``limit`` of them (the rest come on later ticks), or with
``catchup`` off only the latest one. The new cursor is always a slot time, so it moves only
when a slot was handled and a quiet tick writes nothing.

Slot keys and scheduled run ids are derived from the workflow name and the slot alone, so any
scheduler that plans the same slot names the same key and the same run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from heddle.shared.core.cron import slots_between
from heddle.shared.core.namespaces import qualified, split_qualified

TINY = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Plan:
    slots: list[datetime]  # to run, oldest first
    cursor: datetime | None  # the new cursor, or None if it stays where it is


def last_slot(expr: str, tz: str | None, at: datetime) -> datetime | None:
    """The latest slot at or before ``at``."""
    zone = ZoneInfo(tz or "UTC")
    try:
        return croniter(expr, (at + TINY).astimezone(zone)).get_prev(datetime)
    except Exception:  # croniter gives up on dates it cannot reach
        return None


def _gaps(
    skip: Sequence[tuple[datetime, datetime]], after: datetime, now: datetime
) -> list[tuple[datetime, datetime]]:
    """The paused intervals that overlap (after, now], sorted and merged."""
    out: list[tuple[datetime, datetime]] = []
    for start, end in sorted(skip):
        if end <= after or start > now or end < start:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _in_gap(
    slot: datetime, gaps: list[tuple[datetime, datetime]]
) -> tuple[datetime, datetime] | None:
    for gap in gaps:
        if gap[0] <= slot <= gap[1]:
            return gap
    return None


def plan(
    expr: str,
    tz: str | None,
    after: datetime,
    now: datetime,
    *,
    catchup: bool = True,
    limit: int = 1000,
    skip: Sequence[tuple[datetime, datetime]] = (),
) -> Plan:
    """The slots in (after, now] to run now, and the cursor to store after running them.
    ``skip`` holds closed intervals (paused time) whose slots are never run."""
    latest = last_slot(expr, tz, now)
    if latest is None or latest <= after:
        return Plan([], None)
    gaps = _gaps(skip, after, now)
    if not catchup:
        slot: datetime | None = latest
        while slot is not None and slot > after:
            gap = _in_gap(slot, gaps)
            if gap is None:
                return Plan([slot], latest)
            slot = last_slot(expr, tz, gap[0] - TINY)
        return Plan([], latest)
    slots: list[datetime] = []
    lo = after
    # Run through the open stretches between pauses; a pause is jumped, not walked.
    for start, end in [*gaps, (now + TINY, now + TINY)]:
        if start > lo:
            slots += slots_between(expr, tz, lo, min(start - TINY, now), limit - len(slots))
            if len(slots) >= limit:
                return Plan(slots, slots[-1])
        lo = max(lo, end)
    return Plan(slots, latest)


def slot_stamp(slot: datetime) -> str:
    """The slot as it appears in keys and run ids: UTC, minute precision (cron's own)."""
    return slot.astimezone(UTC).strftime("%Y%m%dT%H%MZ")


def scheduled_run_id(workflow: str, slot: datetime) -> str:
    """The run a slot becomes: ``<workflow>-<stamp>``, readable in `nats` output; a long
    workflow name is shortened and disambiguated by a digest to stay within 64 characters.
    A namespaced workflow's runs are in its namespace."""
    namespace, own = split_qualified(workflow)
    stamp = slot_stamp(slot)
    rid = f"{own}-{stamp}"
    if len(rid) > 64:
        digest = hashlib.sha256(f"{own}\x00{stamp}".encode()).hexdigest()[:8]
        rid = f"{own[:40]}-{digest}-{stamp}"
    return qualified(namespace, rid)


def keyed_run_id(workflow: str, key: str) -> str:
    """The run an idempotency key names: the same workflow and key give the same run."""
    namespace, own = split_qualified(workflow)
    digest = hashlib.sha256(f"{own}\x00{key}".encode()).hexdigest()[:16]
    return qualified(namespace, f"{own[:40]}-k{digest}")


def named_slot(text: object, expr: str | None, tz: str | None, now: datetime) -> datetime:
    """The slot a person names for a manual run (``scheduledFor``): an ISO 8601 time with
    its offset, a whole minute, not in the future, and one of the schedule's slots if the
    workflow has one. Raises ValueError saying what is wrong."""
    if not isinstance(text, str):
        raise ValueError("scheduledFor must be an ISO 8601 time string")
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time") from None
    if at.tzinfo is None:
        raise ValueError(f"{text!r} has no offset: add Z (UTC) or one such as +02:00")
    try:
        at = at.astimezone(UTC)
    except OverflowError:  # year 1 east of UTC, year 9999 west of it
        raise ValueError(f"{text!r} is out of range in UTC") from None
    if at.second or at.microsecond:
        raise ValueError(f"{text!r} is not a whole minute: slots are cron's minutes")
    if at > now:
        raise ValueError(f"{text!r} is in the future")
    if expr and last_slot(expr, tz, at) != at:
        before = last_slot(expr, tz, at)
        hint = f"; the slot before it is {before.astimezone(UTC):%Y-%m-%dT%H:%MZ}" if before else ""
        raise ValueError(f"{text!r} is not a slot of the schedule {expr!r} ({tz or 'UTC'}){hint}")
    return at
