"""The per-step budget (pure): what one step may cost the whole stack, in messages sent by
the services (bench/messages.py counts them) and, for the fan-out, in CPU.

The message budget is what the guarantees need (docs/performance.md, "Where a step's cost
goes") plus what the stack still sends beside it; a change that adds a message to a step
shows as a budget that no longer holds. The CPU budget is half of the 3.5 ms a fan-out
step cost the stack when the budget was set.
"""

from __future__ import annotations

from typing import Any

from bench.message_table import SERVICES
from bench.messages import SENT
from bench.report import TARGETED, Row, at_most
from bench.stats import Spread

# Messages the services may send per step, by workload kind.
MESSAGES_SENT = {"chain": 8.5, "fanout": 9.6, "diamonds": 11.25}
CPU_MS_PER_FANOUT_STEP = 1.75


def budget_rows(result: dict[str, Any]) -> list[Row]:
    """The budget's rows of one workload: its messages sent per step (from its count pass)
    and, for a fan-out, the whole stack's CPU per step. Targets on the issue's sizes only."""
    name, kind = result["workload"], result["kind"]
    targeted = name in TARGETED
    rows: list[Row] = []
    counted = result.get("messages_per_step")
    if counted and kind in MESSAGES_SENT:
        sent = sum(counted.get(service, {}).get(SENT, 0.0) for service in SERVICES)
        figure = f"{name} messages sent per step, every service"
        rows.append(_row(figure, "", Spread.of([sent]), MESSAGES_SENT[kind], targeted))
    if kind == "fanout" and result.get("mode") == "run" and result.get("reps"):
        steps = result["steps"]
        cpu = Spread.of(sum(rep["cpu_s"].values()) * 1000 / steps for rep in result["reps"])
        figure = f"{name} CPU per step, every service"
        rows.append(_row(figure, "ms", cpu, CPU_MS_PER_FANOUT_STEP, targeted))
    return rows


def _row(figure: str, unit: str, spread: Spread | None, limit: float, targeted: bool) -> Row:
    """A figure with no baseline, held to ``limit`` where the workload is one the targets
    apply to."""
    if not targeted:
        return Row(figure, unit, spread)
    target = f"<= {limit:g}{f' {unit}' if unit else ''}"
    return Row(figure, unit, spread, None, None, target, at_most(limit)(spread, None))
