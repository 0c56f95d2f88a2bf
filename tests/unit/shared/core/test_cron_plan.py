"""shared/core/cron_plan.py: the slots a schedule fires between two times (a backfill's limit and
its cursor, catch-up off, paused spans, time zones) and the run ids derived from them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from heddle.shared.core.cron_plan import keyed_run_id, plan, scheduled_run_id

T0 = datetime(2024, 1, 1, 0, 0, 30, tzinfo=UTC)
MIN = timedelta(minutes=1)


def test_plan_every_minute_for_five_minutes() -> None:
    p = plan("* * * * *", None, T0, T0 + 5 * MIN)
    assert [s.minute for s in p.slots] == [1, 2, 3, 4, 5]
    assert p.cursor == p.slots[-1]
    assert plan("* * * * *", None, p.cursor, T0 + 5 * MIN) == type(p)([], None)


def test_plan_backfill_is_limited_and_resumes_at_the_cursor() -> None:
    now, after, got = T0 + 3000 * MIN, T0, []
    for _ in range(3):
        p = plan("* * * * *", None, after, now, limit=1000)
        assert len(p.slots) == 1000
        got += p.slots
        after = p.cursor
    assert got == [T0.replace(second=0) + (i + 1) * MIN for i in range(3000)]
    assert plan("* * * * *", None, after, now, limit=1000).slots == []


def test_plan_without_catchup_runs_only_the_latest_slot() -> None:
    p = plan("*/10 * * * *", None, T0, T0 + 2 * timedelta(hours=1), catchup=False)
    assert p.slots == [datetime(2024, 1, 1, 2, 0, tzinfo=UTC)] and p.cursor == p.slots[0]


def test_plan_skips_slots_that_fell_while_paused() -> None:
    pause = (T0 + 10 * MIN, T0 + 20 * MIN)  # 00:10:30 .. 00:20:30
    p = plan("* * * * *", None, T0, T0 + 25 * MIN, skip=[pause])
    assert [s.minute for s in p.slots] == [*range(1, 11), 21, 22, 23, 24, 25]
    latest = plan("* * * * *", None, T0, T0 + 20 * MIN, catchup=False, skip=[pause])
    assert [s.minute for s in latest.slots] == [10] and latest.cursor.minute == 20
    # A year-long pause is jumped, not walked slot by slot.
    long = (T0, T0 + timedelta(days=365))
    assert plan("* * * * *", None, T0, long[1] + 2 * MIN, skip=[long]).slots[0] > long[1]


def test_plan_in_a_time_zone() -> None:
    p = plan("0 9 * * *", "Europe/Paris", T0, T0 + timedelta(days=2))
    assert [s.astimezone(UTC).hour for s in p.slots] == [8, 8]  # 09:00 CET


def test_derived_run_ids_are_stable_and_safe() -> None:
    slot = datetime(2024, 1, 1, 6, 0, tzinfo=UTC)
    assert scheduled_run_id("etl", slot) == "etl-20240101T0600Z"
    long = scheduled_run_id("x" * 64, slot)
    assert len(long) <= 64 and long == scheduled_run_id("x" * 64, slot)
    assert long != scheduled_run_id("x" * 63 + "y", slot)
    assert keyed_run_id("etl", "k1") == keyed_run_id("etl", "k1") != keyed_run_id("etl", "k2")
    assert all(len(keyed_run_id("w" * 64, k)) <= 64 for k in ("a", "b" * 256))
