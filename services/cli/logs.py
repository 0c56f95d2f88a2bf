"""`heddle logs RUN STEP [-f] [--attempt N]`: a step's log printed, or followed live.

Without ``-f`` one read of ``.../logs`` (every line, across attempts); with it, the
server-sent events of ``.../logs?follow=1`` until the ``end`` event, which the gateway sends
once the step is terminal and its last line was sent. The API has no attempt filter, so
``--attempt`` keeps the lines whose ``attempt`` matches, here. On a terminal a line's control
characters are shown as ``cat -v`` shows them (services/cli/terminal.py), unless ``--raw``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TextIO

import msgspec
from heddle.services.cli import render
from heddle.services.cli.terminal import for_output
from heddle.shared.api.answers import LineDoc
from heddle.shared.api.client import Client
from heddle.shared.api.events import LogEnd


@dataclass(frozen=True, slots=True)
class Shown:
    """Which lines are printed, and how: one attempt's (or all), as JSON, as the step wrote
    them even on a terminal (``raw``)."""

    attempt: int | None = None
    as_json: bool = False
    raw: bool = False

    def wants(self, line: dict[str, Any]) -> bool:
        return self.attempt is None or line.get("attempt") == self.attempt

    def text(self, line: dict[str, Any], out: TextIO) -> str:
        if self.as_json:
            return json.dumps(line)  # JSON escapes every control character itself
        return for_output(render.log_line(line), out, self.raw)


def print_logs(client: Client, run_id: str, step_id: str, shown: Shown, out: TextIO) -> None:
    doc = msgspec.to_builtins(client.logs(run_id, step_id, shown.attempt))
    if shown.as_json:
        out.write(json.dumps(doc) + "\n")
        return
    for line in doc["lines"]:
        out.write(shown.text(line, out) + "\n")


def follow_logs(
    client: Client, run_id: str, step_id: str, shown: Shown, out: TextIO
) -> dict[str, Any] | None:
    """Print lines as the gateway sends them; the ``end`` event's data once the step ends.
    As JSON, each line's JSON (and the end's) on a line of its own."""
    for event in client.follow(run_id, step_id):
        if isinstance(event, LineDoc):
            line = msgspec.to_builtins(event)
            if shown.wants(line):
                out.write(shown.text(line, out) + "\n")
                out.flush()
        elif isinstance(event, LogEnd):
            end: dict[str, Any] = msgspec.to_builtins(event)
            if shown.as_json:
                out.write(json.dumps({"end": end}) + "\n")
            return end
    return None  # the stream closed before the step ended (the gateway went away)
