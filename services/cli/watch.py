"""`heddle watch` (and `--wait`): follow a run until it ends, show what changes, and give the
run's exit code.

The run document is read once, then kept up to date from the run's server-sent events
(``GET /api/runs/{run}/events``): each change arrives as it is stored, and nothing is read
again until the ``end`` event, when the document is read once more, whole. A gateway that
does not stream them (or a stream that breaks) is read every ``POLL_INTERVAL`` instead.
What is shown depends on where the output goes: a live rich view on a terminal, a plain line
per change otherwise, or the document as a JSON line each time it changes with ``--json``.
On a terminal, what the run's steps could have made (a reason, an id) has its control
characters shown as ``cat -v`` shows them (services/cli/terminal.py).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

from heddle.services.cli import render
from heddle.services.cli.http import Gateway, Refused, Unreachable
from heddle.services.cli.terminal import for_output, visible
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

EXIT_CODES = {"succeeded": 0, "failed": 1, "cancelled": 3}
POLL_INTERVAL = 0.5  # seconds between reads of the run, where its events are not streamed
SHOW_INTERVAL = 0.2  # seconds between redraws while events arrive
APPEAR_WAIT = 10.0  # a run answered 202 (accepted, not yet stored) may 404 this long
OUTAGE_WAIT = 10.0  # a gateway restarting may not answer this long before we give up
TERMINAL_RUN = frozenset(EXIT_CODES)
TERMINAL_STEP = frozenset({"succeeded", "failed", "skipped", "cancelled"})
STATE_STYLES = {
    "pending": "dim",
    "queued": "cyan",
    "running": "blue",
    "retrying": "yellow",
    "waiting": "yellow",
    "succeeded": "green",
    "failed": "red",
    "skipped": "magenta",
    "cancelled": "yellow",
}


class Sink(Protocol):
    def update(self, run: dict[str, Any]) -> None: ...

    def close(self, run: dict[str, Any] | None) -> None: ...


def exit_code(run: dict[str, Any]) -> int:
    return EXIT_CODES.get(run["status"], 1)


def follow(
    gateway: Gateway, run_id: str, sink: Sink, interval: float = POLL_INTERVAL
) -> dict[str, Any]:
    """Follow the run until it is terminal, handing each new state to ``sink``; the last."""
    path = f"/api/runs/{run_id}"
    run: dict[str, Any] | None = None
    try:
        run = poll(gateway, path, sink, interval, until_seen=True)
        if run["status"] not in TERMINAL_RUN:
            with contextlib.suppress(Refused, Unreachable, OSError, ValueError):
                run = told(gateway, path, run, sink)
        if run["status"] not in TERMINAL_RUN:  # no stream, or it broke: read instead
            run = poll(gateway, path, sink, interval)
        return run
    finally:
        sink.close(run)


def told(gateway: Gateway, path: str, run: dict[str, Any], sink: Sink) -> dict[str, Any]:
    """Apply the run's events to ``run`` until the end event; then the whole document."""
    steps = {step["id"]: step for step in run["steps"]}
    shown = time.monotonic()
    for kind, data in gateway.events(f"{path}/events"):
        change = json.loads(data)
        if kind == "end":
            run = gateway.call("GET", path)
            sink.update(run)
            return run
        if kind == "step" and change["stepId"] in steps:
            steps[change.pop("stepId")].update(change)
        elif kind == "run":
            run.update(change)
        # Thousands of changes a second are shown a few times a second, not each.
        if time.monotonic() - shown >= SHOW_INTERVAL:
            shown = time.monotonic()
            sink.update(run)
    return run


def poll(
    gateway: Gateway, path: str, sink: Sink, interval: float, until_seen: bool = False
) -> dict[str, Any]:
    """Read the run every ``interval`` until it is terminal (or, ``until_seen``, stored)."""
    seen = False
    last_answer = time.monotonic()
    while True:
        try:
            run: dict[str, Any] = gateway.call("GET", path)  # the run's document
        except Refused as exc:
            # Only a run not stored yet is waited for, and only briefly.
            if seen or exc.status != 404 or time.monotonic() - last_answer > APPEAR_WAIT:
                raise
        except Unreachable:
            if time.monotonic() - last_answer > OUTAGE_WAIT:
                raise
        else:
            seen, last_answer = True, time.monotonic()
            sink.update(run)
            if until_seen or run["status"] in TERMINAL_RUN:
                return run
        time.sleep(interval)


class PlainSink:
    """A line per change: the run's start, each step's new state, the run's end."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.shown: dict[str, tuple[str, int]] = {}
        self.started = False

    def update(self, run: dict[str, Any]) -> None:
        lines = []
        if not self.started:
            self.started = True
            total = run.get("stepCount", len(run["steps"]))
            lines.append(f"run {run['runId']} {run['status']}: {total} steps")
        for step in run["steps"]:
            key = (step["status"], step["attempt"])
            if self.shown.get(step["id"]) != key and (step["id"] in self.shown or key[1]):
                lines.append(render.step_change(step))
            self.shown[step["id"]] = key
        if run["status"] in TERMINAL_RUN:
            lines.append(render.run_end(run))
        if lines:
            self.out.write(for_output("\n".join(lines), self.out) + "\n")
            self.out.flush()

    def close(self, run: dict[str, Any] | None) -> None:
        pass


class JsonSink:
    """The run document as one JSON line each time it changes."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.last = ""

    def update(self, run: dict[str, Any]) -> None:
        text = json.dumps(run)
        if text != self.last:
            self.last = text
            self.out.write(text + "\n")
            self.out.flush()

    def close(self, run: dict[str, Any] | None) -> None:
        pass


def live_view(run: dict[str, Any], now: datetime | None = None) -> RenderableType:
    """The terminal view: the run, a bar of finished steps, counts by state, running steps."""
    now = now or datetime.now(UTC)
    steps = run["steps"]
    total = run.get("stepCount", len(steps))
    done = sum(n for state, n in render.step_counts(run).items() if state in TERMINAL_STEP)
    took = render.duration(render.seconds_between(run["createdAt"], run.get("finishedAt"), now))
    title = Text.assemble(
        ("run ", "bold"),
        (visible(run["runId"]), "bold"),
        "  ",
        (run["status"], STATE_STYLES.get(run["status"], "")),
        f"  {took}",
    )
    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=max(total, 1), completed=done, width=40), f"{done}/{total}")
    counts = render.step_counts(run)
    states = Text("  ").join(
        Text(f"{state} {counts[state]}", style=STATE_STYLES[state])
        for state in render.STEP_STATES
        if counts.get(state)
    )
    parts: list[RenderableType] = [title, bar, states]
    active = [s for s in steps if s["status"] in ("running", "retrying")]
    if active:
        table = Table("step", "state", "attempt", "runner", "elapsed", box=None, padding=(0, 2))
        for s in active:
            elapsed = render.seconds_between(s.get("startedAt"), None, now)
            table.add_row(
                Text(visible(s["id"])),  # Text: taken as it is, not as rich's markup
                Text(s["status"], style=STATE_STYLES[s["status"]]),
                str(s["attempt"]),
                Text(visible(s.get("runner") or "-")),
                render.duration(elapsed),
            )
        parts.append(table)
    return Group(*parts)


class LiveSink:
    """The rich view, redrawn at each read; a failure's reason printed above it as it happens."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self.live: Live | None = None
        self.reported: set[tuple[str, int, str]] = set()

    def update(self, run: dict[str, Any]) -> None:
        if self.live is None:
            self.live = Live(console=self.console, auto_refresh=False, transient=False)
            self.live.start()
        for step in run["steps"]:
            key = (step["id"], step["attempt"], step["status"])
            if step["status"] in ("failed", "retrying") and key not in self.reported:
                self.reported.add(key)
                self.console.print(Text(visible(render.step_change(step)), style="red"))
        self.live.update(live_view(run), refresh=True)

    def close(self, run: dict[str, Any] | None) -> None:
        if self.live is not None:
            self.live.stop()
        if run is not None and run["status"] in TERMINAL_RUN:
            # Text: no auto-highlighting of numbers
            self.console.print(Text(visible(render.run_end(run))))


def sink_for(as_json: bool, out: TextIO = sys.stdout) -> Sink:
    if as_json:
        return JsonSink(out)
    if out.isatty():
        return LiveSink()
    return PlainSink(out)
