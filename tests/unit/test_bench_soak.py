"""The soak's pure parts: its load, the ledger's verdict, the per-minute series and their
slopes, and its tables (bench/soak_load.py, soak_verdict.py, soak_series.py, soak_report.py)."""

from __future__ import annotations

import pytest

from bench.soak_load import CRON_WORKFLOW, cron_workflow, mix, step_command, step_ids
from bench.soak_report import minute_table, slope_table, verdict_text
from bench.soak_series import (
    ProcPoint,
    RunPoint,
    Slope,
    StorePoint,
    default_skip,
    kind,
    per_minute,
    series,
    slope,
    slopes,
)
from bench.soak_verdict import Expected, LedgerRow, parse_ledger, verdict

# ---- the load -----------------------------------------------------------------------------


def test_every_step_of_the_load_writes_itself_into_the_ledger() -> None:
    command = step_command("soak/the ledger")
    assert command.startswith('echo "$HEDDLE_RUN_ID $HEDDLE_STEP_ID $HEDDLE_ATTEMPT $$" >> ')
    assert "'soak/the ledger'" in command  # quoted: a path with a space stays one word
    shapes = mix("soak/ledger")
    assert [name for name, _ in shapes] == ["diamond", "chain", "fanout", "diamond"]
    for _, steps in shapes:
        assert all(s["command"] == step_command("soak/ledger") for s in steps)
        assert len(set(step_ids(steps))) == len(steps)
    doc = cron_workflow("soak/ledger")
    assert doc["name"] == CRON_WORKFLOW and doc["schedule"] == "* * * * *"
    assert step_ids(doc["steps"]) == ["A", "B", "C", "D"]


# ---- the verdict --------------------------------------------------------------------------

CRON_1, CRON_2 = f"{CRON_WORKFLOW}-20261206T0201Z", f"{CRON_WORKFLOW}-20261206T0202Z"


def expected() -> Expected:
    return Expected(
        submitted={"mix-1": ["a", "b"], "mix-2": ["a"]},
        cron={CRON_1: ["A"], CRON_2: ["A"]},
        cron_prefix=f"{CRON_WORKFLOW}-",
        cron_last=CRON_2,
    )


def rows_once() -> list[LedgerRow]:
    runs = [("mix-1", "a"), ("mix-1", "b"), ("mix-2", "a"), (CRON_1, "A"), (CRON_2, "A")]
    return [LedgerRow(r, s, 1, 100 + i) for i, (r, s) in enumerate(runs)]


ALL_ENDED = {"mix-1": "succeeded", "mix-2": "succeeded", CRON_1: "succeeded", CRON_2: "succeeded"}


def test_a_soak_where_everything_ran_once_and_ended_is_ok() -> None:
    v = verdict(expected(), ALL_ENDED, rows_once())
    assert v["ok"] and v["lost"] == 0 and v["run_twice"] == 0
    assert (v["runs_submitted"], v["runs_succeeded"], v["cron_slots_succeeded"]) == (2, 2, 2)
    assert "OK" in verdict_text(v) and "NOT OK" not in verdict_text(v)


def test_a_failed_run_a_run_never_ended_and_a_missed_slot_are_lost() -> None:
    ended = {"mix-1": "failed", CRON_1: "succeeded"}
    v = verdict(expected(), ended, rows_once())
    assert v["runs_failed"] == ["mix-1"] and v["runs_never_ended"] == ["mix-2"]
    assert v["cron_missed"] == [CRON_2]
    assert v["lost"] == 3 and not v["ok"]
    assert "NOT OK" in verdict_text(v)


def test_an_attempt_twice_or_a_second_attempt_is_a_step_run_twice() -> None:
    rows = [*rows_once(), LedgerRow("mix-1", "a", 1, 999), LedgerRow(CRON_1, "A", 2, 998)]
    v = verdict(expected(), ALL_ENDED, rows)
    assert v["attempts_run_twice"] == ["mix-1/a.1"]
    assert v["attempts_beyond_first"] == [f"{CRON_1}/A.2"]
    assert v["cron_doubled"] == [CRON_1]
    assert v["run_twice"] == 2 and v["lost"] == 0 and not v["ok"]


def test_a_slot_that_was_not_due_is_a_doubled_slot_and_a_later_one_is_ignored() -> None:
    before = f"{CRON_WORKFLOW}-20261206T0200Z"  # before the registration
    after = f"{CRON_WORKFLOW}-20261206T0203Z"  # past the load's end: not judged
    rows = [*rows_once(), LedgerRow(before, "A", 1, 1), LedgerRow(after, "A", 1, 2)]
    v = verdict(expected(), ALL_ENDED, rows)
    assert v["cron_doubled"] == [before] and v["run_twice"] == 1 and not v["ok"]


def test_missing_steps_torn_lines_and_refused_submits_are_not_ok() -> None:
    rows = [r for r in rows_once() if (r.run, r.step) != ("mix-1", "b")]
    v = verdict(expected(), ALL_ENDED, rows)
    assert v["steps_not_in_ledger"] == ["mix-1/b"] and not v["ok"]
    assert not verdict(expected(), ALL_ENDED, rows_once(), torn=1)["ok"]
    refused = expected()
    refused.refused = 1
    assert not verdict(refused, ALL_ENDED, rows_once())["ok"]


def test_the_ledger_is_read_line_by_line_and_a_torn_line_counted() -> None:
    rows, torn = parse_ledger("mix-1 a 1 42\nmix-1 b 1\n\nmix-2 a x 7\nmix-2 a 2 43\n")
    assert rows == [LedgerRow("mix-1", "a", 1, 42), LedgerRow("mix-2", "a", 2, 43)]
    assert torn == 3
    assert rows[1].key == "mix-2/a.2"


# ---- series and slopes --------------------------------------------------------------------


def test_a_slope_is_the_least_squares_line_per_minute_and_relative_to_the_mean() -> None:
    s = slope([3.0, 5.0, None, 9.0])
    assert s is not None
    assert s.per_minute == pytest.approx(2.0) and s.points == 3
    assert s.mean == pytest.approx(17 / 3) and s.relative == pytest.approx(2.0 / (17 / 3))
    flat = slope([4.0, 4.0, 4.0])
    assert flat == Slope(0.0, 4.0, 0.0, 3)
    assert slope([1.0, None]) is None
    assert slope([0.0, 0.0]) == Slope(0.0, 0.0, None, 2)
    # Noise around a flat line reads as (about) flat.
    noisy = slope([10.0, 11.0, 9.0, 10.0, 11.0, 9.0])
    assert noisy is not None and abs(noisy.per_minute) < 0.2


def test_minutes_hold_means_cpu_across_a_restart_latencies_and_kills() -> None:
    procs = [
        ProcPoint(0, "orchestrator", 1, 50.0, 1.0),
        ProcPoint(30, "orchestrator", 1, 60.0, 4.0),
        ProcPoint(65, "orchestrator", 2, 40.0, 0.5),  # killed and started again: a new pid
        ProcPoint(90, "orchestrator", 2, 44.0, 2.5),
        ProcPoint(10, "runner-0", 7, 30.0, 0.0),
        ProcPoint(70, "runner-0", 7, 32.0, 6.0),
    ]
    stores = [StorePoint(5, 10.0, 8.0), StorePoint(50, 12.0, None), StorePoint(100, 14.0, 9.0)]
    runs = [RunPoint(20, 0.1), RunPoint(40, 0.3), RunPoint(61, 0.2), RunPoint(130, 0.4)]
    rows = per_minute(procs, stores, runs, [31.0, 62.0, 121.0], minutes=2)
    first, second = rows
    assert first.rss_mb == {"orchestrator": 55.0, "runner-0": 30.0}
    assert second.rss_mb == {"orchestrator": 42.0, "runner-0": 32.0}
    assert first.cpu_pct == {"orchestrator": pytest.approx(5.0)}
    assert second.cpu_pct == {"orchestrator": pytest.approx(100 * 2 / 60), "runner-0": 10.0}
    assert (first.disk_mb, first.jetstream_mb) == (11.0, 8.0)
    assert (first.latency_p50_ms, first.runs_ended) == (pytest.approx(200.0), 2)
    # What ended or was killed after the load (the drain) counts in the last minute.
    assert (second.runs_ended, second.kills, first.kills) == (2, 2, 1)
    assert second.latency_p95_ms == pytest.approx(390.0)
    # A last minute that is half a minute long: its CPU is a share of those 30 s.
    half = per_minute(procs, stores, runs, [], minutes=2, load_s=90)
    assert half[1].cpu_pct["runner-0"] == pytest.approx(20.0)
    named = series(rows)
    assert named["rss_mean:orchestrator"] == [55.0, 42.0]
    assert named["cpu_total"] == [pytest.approx(5.0), pytest.approx(100 * 8 / 60)]
    assert named["runs_ended"] == [2, 2]


def test_slopes_leave_out_the_first_minutes_and_kinds_group_processes() -> None:
    stores = [StorePoint(60 * m + 1, size, None) for m, size in enumerate([5.0, 50, 80, 80, 80])]
    rows = per_minute([], stores, [], [], minutes=5)
    fitted = slopes(rows, skip=2)
    disk = fitted["disk_mb"]
    assert disk is not None and disk.per_minute == 0.0 and disk.points == 3
    assert slopes(rows, skip=4)["disk_mb"] == slope([5.0, 50, 80, 80, 80])  # too few: all
    assert [default_skip(n) for n in (1, 3, 4, 5, 10)] == [0, 0, 1, 2, 2]
    assert [kind(n) for n in ("orchestrator-2", "runner-0", "nats-server", "gateway")] == [
        "orchestrator",
        "runner",
        "nats-server",
        "gateway",
    ]


# ---- tables -------------------------------------------------------------------------------


def test_the_tables_have_a_row_per_minute_and_per_series() -> None:
    procs = [ProcPoint(t, "orchestrator-1", 1, 50.0 + t / 60, t / 100) for t in range(0, 180, 5)]
    rows = per_minute(procs, [StorePoint(1, 3.0, 2.0)], [RunPoint(5, 0.05)], [30.0], minutes=3)
    table = minute_table(rows, series(rows)).splitlines()
    assert len(table) == 2 + 3
    assert all(line.count("|") == table[0].count("|") for line in table)
    assert table[2].startswith("| 1 | 50.") and table[2].endswith("| 1 | 1 |")
    fitted = slopes(rows, skip=0)
    text = slope_table(fitted, skip=0)
    assert "RSS, one orchestrator, MB" in text and "+1.00" in text
    assert "| store on disk, MB | - | - | - |" in text  # one minute with a sample: no slope
