"""``python -m bench --profile soak``'s report: the soak run (bench/soak.py), its samples
aggregated per minute with their slopes, the ledger's verdict, printed and written to
bench/results/<stamp>-soak.json. Exit 0 when nothing was lost or run twice and every
service ran at the end; 1 otherwise."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.report import git, machine, versions, write_report
from bench.soak import DISPATCHERS, ORCHESTRATORS, RESTART_AFTER, RUNNERS, run_soak
from bench.soak_report import heap_line, minute_table, slope_table, stream_table, verdict_text
from bench.soak_series import Minute, Slope, default_skip, per_minute, series, slopes


def add_soak_arguments(p: argparse.ArgumentParser) -> None:
    soak = p.add_argument_group("soak (--profile soak)")
    soak.add_argument("--minutes", type=float, default=10.0, help="minutes of load (default 10)")
    soak.add_argument(
        "--kill-every",
        type=float,
        default=30.0,
        help="seconds between SIGKILLs of an orchestrator or dispatcher, in turn (default 30)",
    )
    soak.add_argument("--rate", type=float, default=2.0, help="runs submitted a second (default 2)")
    soak.add_argument(
        "--sample-every", type=float, default=5.0, help="seconds between samples (default 5)"
    )


def soak_problems(args: argparse.Namespace) -> list[str]:
    """Every problem with the soak's arguments."""
    problems = [
        f"--{name.replace('_', '-')} must be above 0"
        for name in ("minutes", "rate", "sample_every")
        if getattr(args, name) <= 0
    ]
    if args.kill_every <= RESTART_AFTER:
        problems.append(f"--kill-every must be above {RESTART_AFTER:g} s (a killed service's rest)")
    return problems


def soak_main(args: argparse.Namespace) -> int:
    settings = dict(item.split("=", 1) for item in args.set)
    report: dict[str, Any] = {
        "profile": "soak",
        "command": "python -m bench " + " ".join(sys.argv[1:]),
        "stack": {"orchestrators": ORCHESTRATORS, "dispatchers": DISPATCHERS, "runners": RUNNERS},
        "minutes": args.minutes,
        "kill_every_s": args.kill_every,
        "rate_per_s": args.rate,
        "sample_every_s": args.sample_every,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "git": git(),
    }
    started = time.monotonic()
    soak, found = asyncio.run(
        run_soak(args.minutes, args.kill_every, args.rate, args.sample_every, settings)
    )
    report.update(found)
    report["duration_s"] = time.monotonic() - started
    report["machine"]["loadavg_at_end"] = list(os.getloadavg())
    n = max(1, math.ceil(args.minutes))
    kills = [k["t"] for k in soak.kills]
    rows = per_minute(soak.procs, soak.stores, soak.runs, kills, n, args.minutes * 60)
    skip = default_skip(n)
    fitted = slopes(rows, skip)
    report["kills"] = soak.kills
    report["samples"] = {  # every sample, t in seconds from the load's start
        "store_mb": [[round(x.t, 1), x.disk_mb, x.jetstream_mb] for x in soak.stores],
        "processes": [[round(x.t, 1), x.service, x.pid, x.rss_mb, x.cpu_s] for x in soak.procs],
        "runs": [[round(x.t, 1), round(x.latency_s, 4)] for x in soak.runs],
    }
    report["streams"] = [[round(t, 1), sizes] for t, sizes in soak.streams]
    report["nats_heap_mb"] = [[round(x, 2) for x in h] for h in soak.heap]
    report["per_minute"] = [r.to_json() for r in rows]
    report["slopes_from_minute"] = skip + 1
    report["slopes"] = {k: s.to_json() if s else None for k, s in fitted.items()}
    out = write_report(report, args.out, "soak")
    print_soak(report, rows, fitted, skip, out)
    if "error" in report:
        return 1
    return 0 if report["verdict"]["ok"] and not report["not_running_at_end"] else 1


def print_soak(
    report: dict[str, Any],
    rows: list[Minute],
    fitted: dict[str, Slope | None],
    skip: int,
    out: Path,
) -> None:
    m, g = report["machine"], report["git"]
    print(
        f"Heddle soak: commit {(g['commit'] or '?')[:12]}{' (dirty)' if g['dirty'] else ''}, "
        f"{m['cpus']} x {m['cpu']}, {report['minutes']:g} min at {report['rate_per_s']:g} "
        f"runs/s, a kill every {report['kill_every_s']:g} s, load average "
        f"{m['loadavg_at_start'][0]:.1f} at start, {m['loadavg_at_end'][0]:.1f} at end"
    )
    print()
    print(minute_table(rows, series(rows)))
    print()
    print(slope_table(fitted, skip))
    print()
    snapshots = [(t, {k: (v[0], v[1]) for k, v in sizes.items()}) for t, sizes in report["streams"]]
    print(stream_table(snapshots, skip))
    print()
    print(heap_line(report["nats_heap_mb"]))
    print()
    if "verdict" in report:
        print(verdict_text(report["verdict"]))
    if report.get("not_running_at_end"):
        print(f"not running at the end: {', '.join(report['not_running_at_end'])}")
    print(f"results in {out}")
    if "error" in report:
        print(f"error: {report['error']} (see the JSON file)")
