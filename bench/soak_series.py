"""The soak's series (pure): samples taken every few seconds, aggregated per minute of the
load, and the least-squares slope of each per-minute series.

A series that does not grow is the goal: the slope is given per minute and relative to the
series' mean, so "0.2 MB/min on 80 MB" reads as 0.25 % a minute. The first minutes (``skip``)
are left out of the slopes: the store fills until retention starts deleting, and a service
warms its caches.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bench.stats import percentile


@dataclass(frozen=True, slots=True)
class ProcPoint:
    """One service process at one moment; ``t`` in seconds from the load's start."""

    t: float
    service: str
    pid: int
    rss_mb: float
    cpu_s: float


@dataclass(frozen=True, slots=True)
class StorePoint:
    t: float
    disk_mb: float  # the store folder's allocated blocks
    jetstream_mb: float | None  # the account's storage, as JetStream tells it


@dataclass(frozen=True, slots=True)
class RunPoint:
    t: float  # when its end was seen
    latency_s: float  # submit -> end


@dataclass(slots=True)
class Minute:
    minute: int
    rss_mb: dict[str, float] = field(default_factory=dict)  # mean per service
    cpu_pct: dict[str, float] = field(default_factory=dict)  # of one core, per service
    disk_mb: float | None = None
    jetstream_mb: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    runs_ended: int = 0
    kills: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def bucket(t: float, minutes: int) -> int:
    """The minute a moment falls in; the drain after the load counts in the last one."""
    return min(max(int(t // 60), 0), minutes - 1)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def cpu_by_minute(
    points: list[ProcPoint], minutes: int, load_s: float | None = None
) -> list[dict[str, float]]:
    """CPU seconds each service used in each minute, as a share of one core: the growth of
    its counter between consecutive samples of the same process (a restarted service is a
    new pid, and its counter starts again). ``load_s``: the load's length, when its last
    minute is a part of one."""
    used: list[dict[str, float]] = [{} for _ in range(minutes)]
    last: dict[tuple[str, int], ProcPoint] = {}
    for p in sorted(points, key=lambda p: p.t):
        before = last.get((p.service, p.pid))
        last[(p.service, p.pid)] = p
        if before is not None and p.cpu_s >= before.cpu_s:
            row = used[bucket(p.t, minutes)]
            row[p.service] = row.get(p.service, 0.0) + p.cpu_s - before.cpu_s
    spans = [min(60.0, (load_s or minutes * 60.0) - 60.0 * i) for i in range(minutes)]
    return [
        {s: 100 * v / span for s, v in row.items()} for row, span in zip(used, spans, strict=True)
    ]


def per_minute(
    procs: list[ProcPoint],
    stores: list[StorePoint],
    runs: list[RunPoint],
    kills: list[float],
    minutes: int,
    load_s: float | None = None,
) -> list[Minute]:
    """One row per minute of the load (``load_s`` long, ``minutes`` * 60 s by default):
    mean RSS per service, CPU per service, the store's mean size, the latency of the runs
    that ended in it, and the kills in it."""
    rows = [Minute(i) for i in range(minutes)]
    rss: list[dict[str, list[float]]] = [{} for _ in range(minutes)]
    for p in procs:
        rss[bucket(p.t, minutes)].setdefault(p.service, []).append(p.rss_mb)
    for row, by_service, cpu in zip(rows, rss, cpu_by_minute(procs, minutes, load_s), strict=True):
        row.rss_mb = {s: sum(v) / len(v) for s, v in sorted(by_service.items())}
        row.cpu_pct = dict(sorted(cpu.items()))
    for row in rows:
        here = [s for s in stores if bucket(s.t, minutes) == row.minute]
        row.disk_mb = _mean([s.disk_mb for s in here])
        row.jetstream_mb = _mean([s.jetstream_mb for s in here if s.jetstream_mb is not None])
        latencies = [r.latency_s * 1000 for r in runs if bucket(r.t, minutes) == row.minute]
        row.latency_p50_ms = percentile(latencies, 50)
        row.latency_p95_ms = percentile(latencies, 95)
        row.runs_ended = len(latencies)
        row.kills = sum(1 for k in kills if bucket(k, minutes) == row.minute)
    return rows


@dataclass(frozen=True, slots=True)
class Slope:
    """A least-squares line through (minute, value): its slope per minute, the mean, and
    the slope as a share of the mean (None for a mean of 0)."""

    per_minute: float
    mean: float
    relative: float | None
    points: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def slope(values: list[float | None], start: int = 0) -> Slope | None:
    """The slope of ``values`` (one per minute, from minute ``start``; None: no sample),
    over the minutes that have one; None for fewer than two."""
    pts = [(float(start + i), v) for i, v in enumerate(values) if v is not None]
    if len(pts) < 2:
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    b = sxy / sxx
    return Slope(b, my, b / my if my else None, n)


def kind(service: str) -> str:
    """A service's kind: ``orchestrator-2`` -> ``orchestrator``, ``runner-0`` -> ``runner``."""
    head, _, tail = service.rpartition("-")
    return head if head and tail.isdigit() else service


def series(rows: list[Minute]) -> dict[str, list[float | None]]:
    """Every per-minute series by name: rss:<service>, cpu:<service>, rss_mean:<kind> (the
    mean process of that kind), cpu_total (every service, in % of one core), disk_mb,
    jetstream_mb, latency_p50_ms, latency_p95_ms, runs_ended."""
    services = sorted({s for r in rows for s in (*r.rss_mb, *r.cpu_pct)})
    out: dict[str, list[float | None]] = {}
    for s in services:
        out[f"rss:{s}"] = [r.rss_mb.get(s) for r in rows]
        out[f"cpu:{s}"] = [r.cpu_pct.get(s) for r in rows]
    for k in sorted({kind(s) for s in services}):
        out[f"rss_mean:{k}"] = [
            _mean([v for s, v in r.rss_mb.items() if kind(s) == k]) for r in rows
        ]
    out["cpu_total"] = [sum(r.cpu_pct.values()) if r.cpu_pct else None for r in rows]
    for name in ("disk_mb", "jetstream_mb", "latency_p50_ms", "latency_p95_ms", "runs_ended"):
        out[name] = [getattr(r, name) for r in rows]
    return out


def slopes(rows: list[Minute], skip: int) -> dict[str, Slope | None]:
    """Each series' slope from minute ``skip`` on (fewer minutes than that: from the start)."""
    start = skip if len(rows) - skip >= 2 else 0
    return {name: slope(values[start:], start) for name, values in series(rows).items()}


def default_skip(minutes: int) -> int:
    """Minutes left out of the slopes: two (the store fills until the first deletions),
    fewer in a short soak, so at least three minutes remain where there are three."""
    return max(0, min(2, minutes - 3))
