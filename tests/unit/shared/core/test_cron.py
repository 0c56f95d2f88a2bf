"""shared/core/cron.py: 5-field expressions, IANA time zones and the slots between two times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from heddle.shared.core.cron import schedule_problem, slots_between, timezone_problem


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    "expr",
    [
        "* * * * *",
        "0 9 * * *",
        "*/15 * * * *",
        "0 9 * * MON-FRI",
        "0 0 1 JAN *",
        "5,35 0-23/2 1,15 * 1-5",
        "0 0 * * 0",
        "0 0 * * 7",
        "0 0 29 2 *",
        "  0   9  *  *  *  ",
        "0 0 * * sun",
        "0 0 1 jan-mar *",
        "5/10 * * * *",
        "0 0 * * 0-7",
        "01 00 * * *",
    ],
)
def test_valid_schedules(expr: str) -> None:
    assert schedule_problem(expr) is None


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("* * * * * *", ["5 fields"]),  # 6 fields (seconds) are not standard cron
        ("0 0 9 * * *", ["5 fields"]),
        ("* * * *", ["5 fields"]),
        ("", ["5 fields"]),
        ("@daily", ["5 fields"]),
        ("61 * * * *", ["not a valid cron"]),
        ("* 24 * * *", ["not a valid cron"]),
        ("* * 0 * *", ["not a valid cron"]),
        ("* * * 13 *", ["not a valid cron"]),
        ("* * * * 8", ["not a valid cron"]),
        ("*/0 * * * *", ["not a valid cron"]),
        ("a b c d e", ["not a valid cron"]),
        # What croniter accepts and standard cron does not (shared/core/cron_fields.py).
        ("1-0 * * * *", ["minute field", "reversed"]),  # croniter: every minute
        ("* * 5-1 * *", ["day of month field", "reversed"]),
        ("0 0 * * FRI-MON", ["day of week field", "reversed"]),
        ("* * * * *\n", ["'\\n'", "one line"]),
        ("*\t* * * *", ["'\\t'"]),
        ("R * * * *", ["minute field", "'R' is not a number"]),  # croniter: random
        ("0 0 L * *", ["day of month field", "'L'"]),
        ("0 0 * FOO *", ["month field", "unknown name 'FOO'"]),
        ("0 0 * * MON#2", ["'#'"]),
        ("*/60 * * * *", ["step /60"]),
        ("1,,2 * * * *", ["minute field"]),
        ("001 * * * *", ["minute field"]),
        (None, ["must be a string"]),
        (5, ["must be a string"]),
        (["*"] * 5, ["must be a string"]),
    ],
)
def test_invalid_schedules(expr: object, words: list[str]) -> None:
    problem = schedule_problem(expr)
    assert problem is not None
    for word in words:
        assert word in problem
    if isinstance(expr, str) and expr:
        assert repr(expr) in problem


@pytest.mark.parametrize("expr", ["0 0 31 2 *", "0 0 30 2 *", "0 12 31 4,6,9,11 *"])
def test_schedule_that_can_never_fire_is_rejected(expr: str) -> None:
    # Accepting it stores a schedule on which slots_between raises CroniterBadDateError.
    assert schedule_problem(expr) is not None


@pytest.mark.parametrize("tz", ["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"])
def test_valid_timezones(tz: str) -> None:
    assert timezone_problem(tz) is None


@pytest.mark.parametrize(
    ("tz", "words"),
    [
        ("Mars/Olympus", ["unknown timezone", "'Mars/Olympus'", "IANA"]),
        ("Europe/Pariss", ["'Europe/Pariss'"]),
        ("", ["unknown timezone"]),
        ("../../etc/passwd", ["unknown timezone"]),
        ("/etc/localtime", ["unknown timezone"]),
        ("localtime", ["unknown timezone"]),  # this host's, whatever it is
        ("Factory", ["unknown timezone"]),  # tzdata's placeholder, no zone
        ("Europe", ["unknown timezone", "'Europe'"]),  # a directory of the zone files
        ("E" * 5000, ["unknown timezone", "..."]),  # longer than a file name may be
        ("Europe/" + "x" * 300, ["unknown timezone"]),
        (5, ["must be a string"]),
        (None, ["must be a string"]),
    ],
)
def test_invalid_timezones(tz: object, words: list[str]) -> None:
    problem = timezone_problem(tz)
    assert problem is not None
    for word in words:
        assert word in problem
    assert len(problem) < 200  # a long name is not repeated whole


# ---- slots --------------------------------------------------------------------------------

EVERY_MINUTE_NOON = [utc(2024, 1, 1, 12, m) for m in range(1, 6)]


@pytest.mark.parametrize(
    ("after", "until", "limit", "expected"),
    [
        (utc(2024, 1, 1, 12, 0), utc(2024, 1, 1, 12, 5), 100, EVERY_MINUTE_NOON),
        (utc(2024, 1, 1, 12, 0, 30), utc(2024, 1, 1, 12, 5), 100, EVERY_MINUTE_NOON),
        (utc(2024, 1, 1, 12, 0), utc(2024, 1, 1, 12, 5, 59), 100, EVERY_MINUTE_NOON),
        (utc(2024, 1, 1, 12, 0), utc(2024, 1, 1, 12, 4, 59), 100, EVERY_MINUTE_NOON[:4]),
        (utc(2024, 1, 1, 12, 0), utc(2024, 1, 1, 12, 5), 3, EVERY_MINUTE_NOON[:3]),
        (utc(2024, 1, 1, 12, 0), utc(2024, 1, 1, 12, 5), 1, EVERY_MINUTE_NOON[:1]),
        (utc(2024, 1, 1, 12, 0), utc(2024, 1, 1, 12, 5), 0, []),
        (utc(2024, 1, 1, 12, 0), utc(2024, 1, 1, 12, 0), 100, []),
        (utc(2024, 1, 1, 12, 5), utc(2024, 1, 1, 12, 0), 100, []),
        (
            utc(2024, 1, 1, 12, 0).astimezone(ZoneInfo("Asia/Tokyo")),
            utc(2024, 1, 1, 12, 2),
            100,
            EVERY_MINUTE_NOON[:2],
        ),
    ],
)
def test_every_minute_slots(
    after: datetime, until: datetime, limit: int, expected: list[datetime]
) -> None:
    slots = slots_between("* * * * *", None, after, until, limit)
    assert slots == expected
    assert all(s.tzinfo is not None for s in slots)


def test_limit_keeps_the_oldest_of_a_long_backlog() -> None:
    slots = slots_between("*/5 * * * *", "UTC", utc(2024, 1, 1), utc(2024, 2, 1), 10)
    assert slots == [utc(2024, 1, 1, 0, 5 * i) for i in range(1, 11)]


@pytest.mark.parametrize(
    ("tz", "day", "utc_hour", "utc_minute"),
    [
        (None, (2024, 1, 15), 9, 0),
        ("UTC", (2024, 7, 15), 9, 0),
        ("Europe/Paris", (2024, 1, 15), 8, 0),  # CET, UTC+1
        ("Europe/Paris", (2024, 7, 15), 7, 0),  # CEST, UTC+2
        ("America/New_York", (2024, 1, 15), 14, 0),  # EST, UTC-5
        ("Asia/Kolkata", (2024, 1, 15), 3, 30),  # UTC+5:30
    ],
)
def test_slots_are_computed_in_the_time_zone(
    tz: str | None, day: tuple[int, int, int], utc_hour: int, utc_minute: int
) -> None:
    start = utc(*day)
    [slot] = slots_between("0 9 * * *", tz, start, start + timedelta(days=1), 10)
    assert slot.astimezone(UTC) == utc(*day, utc_hour, utc_minute)
    assert slot.astimezone(ZoneInfo(tz or "UTC")).hour == 9


def test_daily_slot_in_the_skipped_hour_still_fires_once() -> None:
    # Paris springs forward on 2024-03-31: 02:30 does not exist that day.
    slots = slots_between(
        "30 2 * * *", "Europe/Paris", utc(2024, 3, 30, 12), utc(2024, 4, 1, 12), 10
    )
    assert [s.astimezone(ZoneInfo("Europe/Paris")).date().day for s in slots] == [31, 1]


def test_daily_slot_in_the_repeated_hour_fires_once() -> None:
    # New York falls back on 2024-11-03: 01:30 happens twice, but a daily job runs once a day.
    slots = slots_between(
        "30 1 * * *", "America/New_York", utc(2024, 11, 2, 12), utc(2024, 11, 4, 12), 10
    )
    local_days = [s.astimezone(ZoneInfo("America/New_York")).day for s in slots]
    assert local_days == [3, 4]


def test_hourly_slots_across_the_repeated_hour_are_one_hour_apart() -> None:
    # Paris falls back on 2024-10-27: every elapsed hour is a slot, none doubled or lost.
    slots = slots_between(
        "0 * * * *", "Europe/Paris", utc(2024, 10, 26, 23), utc(2024, 10, 27, 3), 10
    )
    assert [s.astimezone(UTC) for s in slots] == [utc(2024, 10, 27, h) for h in range(4)]
