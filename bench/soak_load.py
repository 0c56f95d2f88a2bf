"""The soak's load (pure): the runs it submits in turn, a workflow on a cron schedule, and
the one command every step of both runs, which writes down that it ran and prints a few log
lines.

Each step appends ``<run> <step> <attempt> <pid>`` to one ledger file before its output, so
the verdict (bench/soak_verdict.py) is about what ran, not only what the run documents say.
"""

from __future__ import annotations

import shlex
from typing import Any

from bench.workloads import Step, chain, diamond, fanout

CRON_WORKFLOW = "soak-cron"
# The finest schedule cron takes: every minute.
EVERY_MINUTE = "* * * * *"
LOG_LINES = 20  # what each step prints: its log reaches the store, and retention frees it
RUN_PREFIX = "mix"  # submitted runs: mix-<n>-<hex>, never a cron run's <workflow>-<slot>


def step_command(ledger: str, lines: int = LOG_LINES) -> str:
    """Append this attempt to the ledger (one short line: a single atomic append), then
    print ``lines`` lines."""
    who = "$HEDDLE_RUN_ID $HEDDLE_STEP_ID $HEDDLE_ATTEMPT $$"
    return f'echo "{who}" >> {shlex.quote(ledger)}; seq 1 {lines}'


def mix(ledger: str) -> list[tuple[str, list[Step]]]:
    """The shapes submitted in turn, by name: a diamond, a chain of 5, a fan-out of 6
    (8 steps) and a diamond again, so diamonds are half the runs."""
    command = step_command(ledger)
    return [
        ("diamond", diamond(command)),
        ("chain", chain(5, command)),
        ("fanout", fanout(6, command)),
        ("diamond", diamond(command)),
    ]


def cron_workflow(ledger: str) -> dict[str, Any]:
    """A registered workflow run every minute by the scheduler: a diamond of ledger steps."""
    return {
        "name": CRON_WORKFLOW,
        "description": "the soak's scheduled runs",
        "schedule": EVERY_MINUTE,
        "steps": diamond(step_command(ledger)),
    }


def step_ids(steps: list[Step]) -> list[str]:
    return [str(s["id"]) for s in steps]
