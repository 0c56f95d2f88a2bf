"""The soak's tables (pure): one row per minute, the slope of each series, and the ledger's
verdict in words. Markdown tables, so that docs/performance.md can take them as printed."""

from __future__ import annotations

from typing import Any

from bench.soak_series import Minute, Slope

# Per-kind RSS columns of the minute table (each the mean process of that kind).
KINDS = ("orchestrator", "dispatcher", "gateway", "runner", "nats-server")
# The series whose slope is printed, with what they are; every slope is in the JSON.
SLOPED = (
    *((f"rss_mean:{k}", f"RSS, one {k}, MB") for k in KINDS),
    ("cpu_total", "CPU, all services, % of one core"),
    ("disk_mb", "store on disk, MB"),
    ("jetstream_mb", "JetStream storage, MB"),
    ("latency_p50_ms", "run latency p50, ms"),
    ("latency_p95_ms", "run latency p95, ms"),
    ("runs_ended", "runs ended"),
)


def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def minute_table(rows: list[Minute], per_kind: dict[str, list[float | None]]) -> str:
    """``per_kind``: the series of bench/soak_series.py's ``series`` (rss_mean:<kind>,
    cpu_total)."""
    head = ["min", *(f"RSS {k} MB" for k in KINDS), "CPU %", "store MB", "JetStream MB"]
    head += ["p50 ms", "p95 ms", "runs", "kills"]
    lines = [_row(head), _row(["---"] * len(head))]
    for i, r in enumerate(rows):
        cells = [str(r.minute + 1)]
        cells += [fmt(per_kind.get(f"rss_mean:{k}", [None] * len(rows))[i]) for k in KINDS]
        cells += [fmt(per_kind.get("cpu_total", [None] * len(rows))[i], 0)]
        cells += [fmt(r.disk_mb), fmt(r.jetstream_mb)]
        cells += [fmt(r.latency_p50_ms, 0), fmt(r.latency_p95_ms, 0)]
        cells += [str(r.runs_ended), str(r.kills)]
        lines.append(_row(cells))
    return "\n".join(lines)


def _relative(s: Slope) -> str:
    return "-" if s.relative is None else f"{100 * s.relative:+.2f} %"


def slope_table(slopes: dict[str, Slope | None], skip: int) -> str:
    head = ["series", "mean", "slope / min", "relative / min"]
    lines = [_row(head), _row(["---"] * len(head))]
    for name, label in SLOPED:
        s = slopes.get(name)
        if s is None:
            lines.append(_row([label, "-", "-", "-"]))
            continue
        lines.append(_row([label, fmt(s.mean), f"{s.per_minute:+,.2f}", _relative(s)]))
    lines.append(f"(least squares over minutes {skip + 1} on; flat is the goal)")
    return "\n".join(lines)


def stream_table(snapshots: list[tuple[float, dict[str, tuple[int, int]]]], skip: int) -> str:
    """Each stream's messages and KB at the first minute the slopes count and at the load's
    end: which one grows."""
    if not snapshots:
        return "(no stream sizes sampled)"
    first_t, first = snapshots[min(skip, len(snapshots) - 1)]
    last_t, last = snapshots[-1]
    head = ["stream", f"msgs at {first_t / 60:.0f} min", "KB", f"msgs at {last_t / 60:.0f} min"]
    head += ["KB", "KB / min"]
    lines = [_row(head), _row(["---"] * len(head))]
    minutes = max((last_t - first_t) / 60, 1e-9)
    for name in sorted(set(first) | set(last)):
        m0, b0 = first.get(name, (0, 0))
        m1, b1 = last.get(name, (0, 0))
        growth = (b1 - b0) / 1024 / minutes
        cells = [name, f"{m0:,}", fmt(b0 / 1024), f"{m1:,}", fmt(b1 / 1024), f"{growth:+,.1f}"]
        lines.append(_row(cells))
    return "\n".join(lines)


def heap_line(heap: list[list[float]]) -> str:
    """nats-server's Go heap, once a minute: in use (HeapAlloc), held from the system
    (HeapSys) and given back (HeapReleased), MB."""
    if not heap:
        return "(nats-server's heap not sampled)"
    cells = [f"{t / 60:.0f} min {alloc:.1f}/{held:.1f}/{back:.1f}" for t, alloc, held, back in heap]
    return "nats-server Go heap, in use / held / released MB: " + ", ".join(cells)


def verdict_text(v: dict[str, Any]) -> str:
    never, failed = len(v["runs_never_ended"]), len(v["runs_failed"])
    return "\n".join(
        [
            f"runs: {v['runs_submitted']} submitted, {v['runs_succeeded']} succeeded, "
            f"{failed} failed, {never} never ended, {v['runs_refused']} refused",
            f"cron slots: {v['cron_slots_due']} due, {v['cron_slots_succeeded']} succeeded, "
            f"{len(v['cron_missed'])} missed, {len(v['cron_doubled'])} doubled",
            f"ledger: {v['ledger_rows']} attempts; {len(v['attempts_run_twice'])} run twice, "
            f"{len(v['attempts_beyond_first'])} beyond attempt 1, "
            f"{len(v['steps_not_in_ledger'])} steps of succeeded runs missing, "
            f"{v['ledger_torn_lines']} torn lines",
            f"lost: {v['lost']}, run twice: {v['run_twice']} -> "
            f"{'OK' if v['ok'] else 'NOT OK (see the JSON file)'}",
        ]
    )
