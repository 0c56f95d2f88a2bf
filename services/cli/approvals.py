"""`heddle approve|reject RUN STEP [--comment TEXT]` and `heddle approvals`, as text: an
answered gate in one line, the gates waiting as a table (docs/approvals.md). Pure: the
answers' JSON in, strings out."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from heddle.services.cli import render


def decision_line(args: argparse.Namespace) -> Callable[[dict[str, Any]], str]:
    """The line `approve` and `reject` print for the gateway's decision."""

    def line(answer: dict[str, Any]) -> str:
        decision = answer["decision"]
        verdict = "approved" if decision["approved"] else "rejected"
        said = f": {decision['comment']}" if decision.get("comment") else ""
        return f"step {args.step} of run {args.run} {verdict} by {decision['by']}{said}"

    return line


def approvals_view(gates: list[dict[str, Any]]) -> str:
    """One row a waiting gate, oldest first as the gateway lists them."""
    if not gates:
        return "no approvals waiting"
    rows = [
        (
            g["runId"],
            g["stepId"],
            g.get("namespace") or "-",
            g.get("workflowName") or "-",
            g["since"],
            g.get("deadlineAt") or "-",
            g["message"],
        )
        for g in gates
    ]
    header = ("RUN", "STEP", "NAMESPACE", "WORKFLOW", "SINCE", "DEADLINE", "MESSAGE")
    return render.table(header, rows)
