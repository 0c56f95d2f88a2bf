"""What ran, as the steps themselves wrote it down: a layered DAG whose every step appends a
start and an end line (its runner, run, step, attempt and pid) to one ledger, and the ledger
read back; and one file per process that ran an attempt, counted."""

from __future__ import annotations

import random
from pathlib import Path

RUNNERS, LAYERS, WIDTH = 4, 4, 15


def step_command(ledger: Path, pause: str) -> str:
    who = "$LEDGER_RUNNER $HEDDLE_RUN_ID/$HEDDLE_STEP_ID.$HEDDLE_ATTEMPT $$"
    line = f'echo "$(date +%s.%N) {{}} {who}" >> {ledger}'
    return f"{line.format('start')}; sleep {pause}; {line.format('end')}"


def layered(ledger: Path, rng: random.Random, width: int = WIDTH) -> dict:
    """One step that opens the run, then LAYERS x ``width`` steps, each depending on two of
    the layer above: most sleep 0.05 s, one in five 0.6 s. Past the first step every step
    is of a run under way, so none waits behind another run's steps by design (docs/
    architecture.md, "Runs under way first") when a kill's effects are timed."""
    steps: list[dict] = [{"id": "open", "command": step_command(ledger, "0.05")}]
    for layer in range(LAYERS):
        for i in range(width):
            pause = "0.6" if rng.random() < 0.2 else "0.05"
            step: dict = {"id": f"l{layer}s{i}", "command": step_command(ledger, pause)}
            above = (f"l{layer - 1}s{i}", f"l{layer - 1}s{(i * 7) % width}") if layer else ("open",)
            step["dependsOn"] = sorted(set(above))
            steps.append(step)
    return {"steps": steps}


def read_ledger(ledger: Path) -> list[tuple[float, str, str, str, int]]:
    """(time, start|end, runner, run/step.attempt, pid) per line."""
    rows = []
    for line in ledger.read_text().splitlines():
        t, what, runner, attempt, pid = line.split()
        rows.append((float(t), what, runner, attempt, int(pid)))
    return rows


def runs_per_attempt(ran: Path) -> dict[str, int]:
    """``m<i>.<attempt>`` -> how many processes ran it."""
    out: dict[str, int] = {}
    for p in ran.iterdir():
        key = p.name.rsplit(".", 1)[0]
        out[key] = out.get(key, 0) + 1
    return out
