"""The message budget's table (pure): per workload and service, the messages one step cost,
by kind (bench/messages.py counts them)."""

from __future__ import annotations

from typing import Any

from bench.messages import AWAITED, OTHER, RECEIVED, SENT, SENT_KINDS

SERVICES = ("gateway", "orchestrator", "dispatcher", "runners")
COLUMNS = (*SENT_KINDS, OTHER, SENT, AWAITED, RECEIVED)


def _cell(x: float) -> str:
    return f"{x:.2f}"


def messages_table(results: list[dict[str, Any]]) -> str:
    """One row per service of each counted workload, and their sum; the bench probe's own
    messages (its submits' answers, its end events) are left out."""
    head = ("workload", "service", *COLUMNS)
    body: list[tuple[str, ...]] = []
    for res in results:
        counted = res.get("messages_per_step")
        if not counted:
            continue
        total = dict.fromkeys(COLUMNS, 0.0)
        for service in SERVICES:
            kinds = counted.get(service, {})
            body.append((res["workload"], service, *(_cell(kinds.get(c, 0.0)) for c in COLUMNS)))
            for c in COLUMNS:
                total[c] += kinds.get(c, 0.0)
        body.append((res["workload"], "all", *(_cell(total[c]) for c in COLUMNS)))
    if not body:
        return ""
    widths = [max(len(str(x[i])) for x in (head, *body)) for i in range(len(head))]
    lines = ["messages per step (one more pass under a tap, less as long idle):"]
    lines.append(" | ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)))
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)) for b in body]
    return "\n".join(line.rstrip() for line in lines)
