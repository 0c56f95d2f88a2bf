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
from urllib.parse import quote

from heddle.services.cli import render
from heddle.services.cli.http import Gateway
from heddle.services.cli.terminal import for_output


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


def logs_path(run_id: str, step_id: str) -> str:
    return f"/api/runs/{quote(run_id, safe='')}/steps/{quote(step_id, safe='')}/logs"


def print_logs(
    gateway: Gateway,
    run_id: str,
    step_id: str,
    shown: Shown,
    out: TextIO,
) -> None:
    doc = gateway.call("GET", logs_path(run_id, step_id))
    doc["lines"] = [line for line in doc["lines"] if shown.wants(line)]
    if shown.as_json:
        out.write(json.dumps(doc) + "\n")
        return
    for line in doc["lines"]:
        out.write(shown.text(line, out) + "\n")


def follow_logs(
    gateway: Gateway,
    run_id: str,
    step_id: str,
    shown: Shown,
    out: TextIO,
) -> dict[str, Any] | None:
    """Print lines as the gateway sends them; the ``end`` event's data once the step ends.
    As JSON, each line's JSON (and the end's) on a line of its own."""
    for kind, data in gateway.events(logs_path(run_id, step_id) + "?follow=1"):
        doc: dict[str, Any] = json.loads(data)  # a line's object, or the end's
        if kind == "message":
            if shown.wants(doc):
                out.write(shown.text(doc, out) + "\n")
                out.flush()
        elif kind == "end":
            if shown.as_json:
                out.write(json.dumps({"end": doc}) + "\n")
            return doc
    return None  # the stream closed before the step ended (the gateway went away)
