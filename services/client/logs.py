"""`heddle logs RUN STEP [-f] [--attempt N]`: a step's log printed, or followed live.

Without ``-f`` one read of ``.../logs`` (every line, across attempts); with it, the
server-sent events of ``.../logs?follow=1`` until the ``end`` event, which the gateway sends
once the step is terminal and its last line was sent. The API has no attempt filter, so
``--attempt`` keeps the lines whose ``attempt`` matches, here.
"""

from __future__ import annotations

import json
from typing import Any, TextIO
from urllib.parse import quote

from services.client import render
from services.client.http import Gateway


def logs_path(run_id: str, step_id: str) -> str:
    return f"/api/runs/{quote(run_id, safe='')}/steps/{quote(step_id, safe='')}/logs"


def _wanted(line: dict[str, Any], attempt: int | None) -> bool:
    return attempt is None or line.get("attempt") == attempt


def print_logs(
    gateway: Gateway,
    run_id: str,
    step_id: str,
    attempt: int | None,
    as_json: bool,
    out: TextIO,
) -> None:
    doc = gateway.call("GET", logs_path(run_id, step_id))
    doc["lines"] = [line for line in doc["lines"] if _wanted(line, attempt)]
    if as_json:
        out.write(json.dumps(doc) + "\n")
        return
    for line in doc["lines"]:
        out.write(render.log_line(line) + "\n")


def follow_logs(
    gateway: Gateway,
    run_id: str,
    step_id: str,
    attempt: int | None,
    as_json: bool,
    out: TextIO,
) -> dict[str, Any] | None:
    """Print lines as the gateway sends them; the ``end`` event's data once the step ends.
    With ``as_json``, each line's JSON (and the end's) on a line of its own."""
    for kind, data in gateway.events(logs_path(run_id, step_id) + "?follow=1"):
        doc = json.loads(data)
        if kind == "message":
            if _wanted(doc, attempt):
                out.write((json.dumps(doc) if as_json else render.log_line(doc)) + "\n")
                out.flush()
        elif kind == "end":
            if as_json:
                out.write(json.dumps({"end": doc}) + "\n")
            return doc
    return None  # the stream closed before the step ended (the gateway went away)
