"""``python -m bench.ab --against PATH``: a workload's latency in this checkout and in
another (a worktree of an earlier commit, say), measured side by side.

Both stacks run at once, each driven by its own checkout's harness (bench/ab_driver.py),
and take turns, the workload's runs submitted at once (one run: a lone run; diamonds-200:
a burst, timed by its median run) on each side per round in ABBA order; the figure is the
median of the per-round differences with a bootstrap 95% interval. On a shared machine a
latency drifts by more than most changes move it within minutes, so runs measured minutes
apart (two ``python -m bench`` calls) cannot tell a millisecond; rounds taken together can.

Both stacks are up during every run, so each run's absolute latency is higher than on an
otherwise idle machine: read the difference, not the sides.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from bench.processes import REPO
from bench.report import git, machine
from bench.stats import paired, percentile
from bench.workloads import make

RESULTS = Path(__file__).resolve().parent / "results"
DRIVER = Path(__file__).with_name("ab_driver.py")
READY_WITHIN = 120.0  # seconds for a stack to come up


def interpreter(repo: Path) -> str:
    """The checkout's own virtualenv's Python where it has one (``make install``): its package
    is installed editable from that checkout, where another Python would import its own."""
    own = repo / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


class Side:
    """A driver process, with a stack of the checkout at ``repo``."""

    def __init__(self, repo: Path, workload: str, settings: dict[str, str]) -> None:
        self.repo = repo
        # Its source run from the checkout's own top folder, so ``bench`` is that checkout's.
        args = [workload, *(f"{k}={v}" for k, v in settings.items())]
        self.proc = subprocess.Popen(
            [interpreter(repo), "-c", DRIVER.read_text(), *args],
            cwd=repo,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _line(self) -> str:
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        line = out.readline().strip()
        if not line or line.startswith("error"):
            raise RuntimeError(f"the stack of {self.repo} stopped: {line or 'no answer'}")
        return line

    def ready(self) -> None:
        if self._line() != "ready":
            raise RuntimeError(f"the stack of {self.repo} did not come up")

    def run(self) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return float(self._line())

    def stop(self) -> None:
        if self.proc.stdin is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--against", type=Path, required=True, help="the other checkout's top folder")
    p.add_argument(
        "--workload", default="diamonds-1", help="its runs, submitted at once, are timed"
    )
    p.add_argument("--rounds", type=int, default=200, help="runs of each side (200)")
    p.add_argument("--warmup", type=int, default=5, help="rounds not counted (5)")
    p.add_argument("--out", type=Path, help="JSON result file (default: bench/results/...)")
    for flag, side in (("--set", "this checkout's"), ("--set-against", "the other's")):
        p.add_argument(
            flag,
            action="append",
            default=[],
            metavar="HEDDLE_X=VALUE",
            help=f"a setting of every service of {side} stack (repeatable); with --against "
            "the same checkout, two settings compared",
        )
    args = p.parse_args(argv)
    for item in args.set + args.set_against:
        if "=" not in item or not item.startswith("HEDDLE_"):
            p.error(f"{item!r}: expected HEDDLE_NAME=VALUE")
    if not (args.against / "bench" / "stack.py").is_file():
        p.error(f"--against {args.against}: not a Heddle checkout with a bench harness")
    if args.rounds < 1 or args.warmup < 0:
        p.error("--rounds must be at least 1 and --warmup at least 0")
    try:
        make(args.workload)
    except ValueError as exc:
        p.error(str(exc))
    return args


def measure(sides: list[Side], rounds: int, warmup: int) -> list[list[float]]:
    """Each side's latencies, one per counted round, taking turns in ABBA order."""
    got: list[list[float]] = [[] for _ in sides]
    for n in range(warmup + rounds):
        order = list(range(len(sides)))
        if n % 2:
            order.reverse()
        for i in order:
            ms = sides[i].run()
            if n >= warmup:
                got[i].append(ms)
    return got


def summary(name: str, values: list[float]) -> dict[str, Any]:
    return {
        "checkout": name,
        "p25_ms": percentile(values, 25),
        "p50_ms": percentile(values, 50),
        "p75_ms": percentile(values, 75),
        "n": len(values),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    here, there = REPO, args.against.resolve()
    settings = [dict(i.split("=", 1) for i in items) for items in (args.set, args.set_against)]
    sides = [Side(here, args.workload, settings[0]), Side(there, args.workload, settings[1])]
    try:
        for side in sides:
            side.ready()
        print(f"{args.workload}: {args.rounds} rounds, ABBA", file=sys.stderr, flush=True)
        mine, theirs = measure(sides, args.rounds, args.warmup)
    finally:
        for side in sides:
            side.stop()
    diff = paired(mine, theirs)
    report = {
        "workload": args.workload,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "git": git(),
        "sides": [summary(str(here), mine), summary(str(there), theirs)],
        "settings": {"this": settings[0], "against": settings[1]},
        "difference": asdict(diff),
        "samples_ms": {"this": mine, "against": theirs},
    }
    for s, label in zip(report["sides"], ("this", "against"), strict=True):
        print(f"{label:8s} p25 {s['p25_ms']:.2f}  p50 {s['p50_ms']:.2f}  p75 {s['p75_ms']:.2f} ms")
    print(
        f"this - against: median {diff.median_diff:+.2f} ms "
        f"[{diff.low:+.2f}, {diff.high:+.2f}] (95%), this faster in "
        f"{diff.a_faster:.0%} of {diff.n} rounds"
    )
    out = args.out or RESULTS / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-ab.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
