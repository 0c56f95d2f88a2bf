"""Step logs over HTTP: a step with its lines grouped by attempt, the lines as JSON, and the
lines followed live as server-sent events.

Lines live in HEDDLE_LOGS on ``heddle.log.<run>.<step>.<attempt>``, one message per line
or per chunk of lines (the complete lines of one pipe read; docs/logs.md). Every read is one
filtered, ordered replay of the step's subjects (an ordered push consumer), never a request
per line. A line's ``cursor`` is its message's stream sequence times ``CURSOR_SPAN`` plus
its index in the message (services/gateway/reads/log_lines.py): unique, increasing, opaque, and
the order the server stored the lines in, which is the order they were written (the
runner's and the orchestrator's alike). ``?after=CURSOR`` and the SSE ``Last-Event-ID``
resume after it, in the middle of a chunk if need be.

- ``GET /api/runs/{run}/steps/{step}[?tail=N]``: the step as in the run document, plus
  ``logs``: one group per attempt, oldest first, each with its last N lines (default
  ``DEFAULT_TAIL``, at most ``MAX_TAIL``), ``lineCount`` and ``truncated``.
- ``GET /api/runs/{run}/steps/{step}/logs[?after=C]``: every line after C, then the end.
- ``...?follow=1``: ``text/event-stream``; every line as a ``data:`` event with ``id:`` its
  cursor, live as it is written, a ``status`` event when the step changes state, and a
  final ``end`` event with the terminal state once the step is terminal and its last line
  was sent (log_follow.py).

Both JSON documents are written as their lines are read (log_documents.py), never built
whole; what comes before the lines (the step, the counts, where each tail starts) is read
first, so a NATS timeout there still answers: 503, with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web
from heddle.services.gateway.handlers.log_documents import dump_logs, write_step
from heddle.services.gateway.handlers.log_follow import follow_logs
from heddle.services.gateway.http.answers import bad_request, error_body
from heddle.services.gateway.http.inputs import path_id, path_step_id
from heddle.services.gateway.http.keys import RESOURCES
from heddle.services.gateway.http.params import header_int, query_int
from heddle.services.gateway.http.scope import object_scope, run_names
from heddle.services.gateway.openapi.route import NAMESPACE, RUN, STEP, Param, Route
from heddle.services.gateway.reads.log_index import last_cursor
from heddle.services.gateway.reads.log_reader import DEFAULT_TAIL, MAX_TAIL
from heddle.services.gateway.reads.log_tail import locate_step
from heddle.services.gateway.reads.runs import get_run_record, get_step_record, step_document
from heddle.shared.api.answers import LogDump, StepWithLogs
from heddle.shared.broker.nats_types import NotFoundError
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepRecord

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import JetStreamContext

log = logging.getLogger("heddle.gateway")
MAX_CURSOR = 2**63 - 1
CURSOR = {"type": "integer", "minimum": 0, "maximum": MAX_CURSOR}


def flag_param(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "").lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise bad_request(f"{name} must be 1 or 0 (true or false), not {raw!r}")


async def _lookup(request: web.Request) -> tuple[str, StepRecord]:
    """The run's stored id and the step's record; a 404 (raised) if either is unknown, or
    the run is in a namespace the caller may not see (as if it were unknown)."""
    run_id = path_id(request, "run", "run id")
    step_id = path_step_id(request)
    scope = object_scope(request)
    stored = scope.stored(run_id)
    runs = request.app[RESOURCES].runs
    run, step = None, None
    if scope.seen:
        run, step = await asyncio.gather(
            get_run_record(runs, stored), get_step_record(runs, stored, step_id)
        )
    if run is None:
        raise _not_found(f"run {run_id!r} not found")
    if step is None:
        raise _not_found(f"run {run_id!r} has no step {step_id!r}")
    return stored, step


def _not_found(message: str) -> web.HTTPNotFound:
    return web.HTTPNotFound(text=error_body(message).decode(), content_type="application/json")


async def heartbeat_at(js: JetStreamContext, run_id: str, step: StepRecord) -> float | None:
    """When the server stored the last heartbeat of the step's runner (epoch seconds), if
    it has one."""
    if step.runner is None:
        return None
    bucket = names.HEARTBEATS_BUCKET
    key = names.stored_heartbeat(run_id, step.id, step.runner)
    try:
        msg = await js.get_last_msg(names.kv_stream(bucket), names.kv_subject(bucket, key))
    except NotFoundError:
        return None
    return msg.time.timestamp() if msg.time else None


async def get_step(request: web.Request) -> web.StreamResponse:
    tail = query_int(request, "tail", 0, MAX_TAIL, DEFAULT_TAIL)
    # A NATS timeout before the answer starts is the middleware's 503 (http/errors.py).
    run_id, step = await _lookup(request)
    js = request.app[RESOURCES].js
    beat = None
    if step.status in ("queued", "running"):
        beat = await heartbeat_at(js, run_id, step)
    head = {**run_names(run_id), **msgspec.to_builtins(step_document(step, beat))}
    tails = await locate_step(js, step, run_id, tail)
    return await write_step(request, js, head, tails)


async def get_logs(request: web.Request) -> web.StreamResponse:
    follow = flag_param(request, "follow")
    after = query_int(request, "after", 0, MAX_CURSOR, 0)
    if follow:  # an EventSource reconnecting resumes where it was
        after = header_int(request.headers, "Last-Event-ID", 0, MAX_CURSOR, after)
    run_id, step = await _lookup(request)
    js = request.app[RESOURCES].js
    subject = names.log_step_filter(run_id, step.id)
    end = 0 if follow else await last_cursor(js, subject)
    if follow:
        return await follow_logs(request, js, run_id, step, subject, after)
    return await dump_logs(request, js, run_id, step, after, end)


ROUTES = (
    Route(
        "GET",
        "/api/runs/{run}/steps/{step}",
        get_step,
        operation_id="getStep",
        summary="A step with its logs by attempt",
        tag="runs",
        role="viewer",
        answers={200: (StepWithLogs, "The step, and the last lines of each attempt")},
        params=(
            NAMESPACE,
            RUN,
            STEP,
            Param(
                "tail",
                "query",
                {"type": "integer", "minimum": 0, "maximum": MAX_TAIL},
                f"Lines per attempt (default {DEFAULT_TAIL})",
            ),
        ),
    ),
    Route(
        "GET",
        "/api/runs/{run}/steps/{step}/logs",
        get_logs,
        operation_id="getStepLogs",
        summary="A step's log lines",
        tag="runs",
        role="viewer",
        answers={
            200: (
                (LogDump, "text/event-stream"),
                "Every line after the cursor (JSON); with follow, server-sent events: a line "
                "per event (its cursor as the id), `status` events and a last `end`",
            )
        },
        params=(
            NAMESPACE,
            RUN,
            STEP,
            Param("after", "query", CURSOR, "Lines after this cursor only"),
            Param(
                "follow",
                "query",
                {"type": "boolean"},
                "Stream the lines as server-sent events until the step ends",
            ),
            Param(
                "Last-Event-ID",
                "header",
                {"type": "string", "pattern": "^[0-9]{0,19}$"},
                "With follow: resume after this cursor",
            ),
        ),
    ),
)
