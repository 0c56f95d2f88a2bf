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
  was sent.

Both JSON documents are written as their lines are read (log_documents.py), never built
whole; what comes before the lines (the step, the counts, where each tail starts) is read
first, so a NATS timeout there still answers: 503, with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web

from services.gateway.handlers.log_documents import dump_logs, write_step
from services.gateway.http import sse
from services.gateway.http.answers import bad_request, error_body
from services.gateway.http.inputs import path_id
from services.gateway.http.keys import RESOURCES
from services.gateway.http.params import header_int, query_int
from services.gateway.reads.log_index import last_cursor
from services.gateway.reads.log_lines import encode_json
from services.gateway.reads.log_reader import (
    DEFAULT_TAIL,
    DRAIN_WAIT,
    KEEPALIVE,
    MAX_TAIL,
    Feed,
)
from services.gateway.reads.log_tail import locate_step
from services.gateway.reads.progress import StepProgress, step_progress
from services.gateway.reads.runs import get_run_record, get_step_record, step_document, stored_when
from shared import names
from shared.contracts import TERMINAL_STEP, StepRecord, step_record_decoder
from shared.kv_changes import KeyChanges
from shared.nats_types import NotFoundError

if TYPE_CHECKING:
    from shared.buckets import Bucket
    from shared.nats_types import JetStreamContext

log = logging.getLogger("heddle.gateway")
MAX_CURSOR = 2**63 - 1


def flag_param(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "").lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise bad_request(f"{name} must be 1 or 0 (true or false), not {raw!r}")


async def _lookup(request: web.Request) -> tuple[str, StepRecord]:
    """The run's id and the step's record; a 404 (raised) if either is unknown."""
    run_id = path_id(request, "run", "run id")
    step_id = path_id(request, "step", "step id")
    runs = request.app[RESOURCES].runs
    run, step = await asyncio.gather(
        get_run_record(runs, run_id), get_step_record(runs, run_id, step_id)
    )
    if run is None:
        raise _not_found(f"run {run_id!r} not found")
    if step is None:
        raise _not_found(f"run {run_id!r} has no step {step_id!r}")
    return run_id, step


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
    head = {"runId": run_id, **msgspec.to_builtins(step_document(step, beat))}
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


def _end(step: StepRecord, cursor: int) -> dict[str, Any]:
    return {
        "status": step.status,
        "attempt": step.attempt,
        "exitCode": step.exit_code,
        "reason": step.reason,
        "finishedAt": step.finished_at,
        "cursor": cursor,
    }


async def follow_logs(
    request: web.Request,
    js: JetStreamContext,
    run_id: str,
    step: StepRecord,
    subject: str,
    after: int,
) -> web.StreamResponse:
    """Server-sent events: lines as they are stored, until the step is terminal and its
    last line was sent. The step's state comes from a subscription to its key in
    heddle-runs (shared/kv_changes.py), read again after subscribing and at every
    keepalive (in case the connection dropped meanwhile)."""
    runs = request.app[RESOURCES].runs
    states = _StepStates(js, runs, run_id, step, subject)
    feed = await Feed(js, subject, after).start()
    changes = KeyChanges(runs, (names.step_key(run_id, step.id),), states.live(feed))
    resp = web.StreamResponse(headers=sse.HEADERS)
    try:
        await changes.start()
        await states.refresh()
        await resp.prepare(request)
        terminal, cursor = await _stream(resp, feed, states, after)
        await resp.write(sse.event("end", _end(terminal, cursor)))
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client went away
    finally:
        await changes.stop()
        await feed.stop()
    return resp


async def _stream(
    resp: web.StreamResponse, feed: Feed, states: _StepStates, cursor: int
) -> tuple[StepRecord, int]:
    """Status changes and lines, until the step is terminal and its last line was sent;
    returns the step's terminal record and the last cursor sent."""
    while True:
        if told := await states.events():
            await resp.write(told)
        if states.terminal is not None and cursor >= states.end:
            return states.terminal, cursor
        try:
            lines, _ = await feed.batch(DRAIN_WAIT if states.terminal is not None else KEEPALIVE)
        except TimeoutError:
            if states.terminal is not None:
                # The last lines are gone (expired meanwhile): end anyway.
                return states.terminal, cursor
            await resp.write(b": keepalive\n\n")
            await states.refresh()
            continue
        if lines:
            out = bytearray()
            for line in lines:
                out += b"id: %d\ndata: %s\n\n" % (line.cursor, encode_json(line))
            cursor = lines[-1].cursor
            await resp.write(out)


class _StepStates:
    """The step's records as its watch and the keepalive reads deliver them, told as
    status events until the step is terminal."""

    def __init__(
        self, js: JetStreamContext, runs: Bucket, run_id: str, step: StepRecord, subject: str
    ) -> None:
        self.js, self.runs, self.run_id, self.step_id = js, runs, run_id, step.id
        self.subject = subject
        self.queue: asyncio.Queue[StepRecord] = asyncio.Queue()
        self.queue.put_nowait(step)
        self.shown: StepProgress | None = None
        self.terminal: StepRecord | None = None
        self.end = 0  # the cursor of the step's last line, once it is terminal

    def live(self, feed: Feed) -> Callable[[str, bytes], None]:
        """What takes the record's puts: queued, and the line reader woken to tell them."""

        def put(_key: str, value: bytes) -> None:
            with contextlib.suppress(msgspec.DecodeError):
                self.queue.put_nowait(step_record_decoder.decode(value))
                with contextlib.suppress(asyncio.QueueFull):  # a full queue wakes it anyway
                    feed.queue.put_nowait(None)

        return put

    async def events(self) -> bytes:
        out = bytearray()
        while not self.queue.empty():
            rec = self.queue.get_nowait()
            progress = step_progress(rec)
            if self.terminal is not None or (self.shown is not None and progress <= self.shown):
                continue  # no further than what was told (the two sources cross)
            if rec.status in TERMINAL_STEP:
                # Ended once the store says so (a put seen live may yet be refused).
                stored = await stored_when(self._read, lambda r: r.status in TERMINAL_STEP)
                if stored is None:
                    continue
                rec = stored
            self.shown = progress
            out += sse.event("status", {"status": rec.status, "attempt": rec.attempt})
            if rec.status in TERMINAL_STEP:
                self.terminal = rec
                # The lines of an attempt are stored before the transition that ends the
                # step is written, so the last one exists now: send up to it.
                self.end = await last_cursor(self.js, self.subject)
        return bytes(out)

    async def _read(self) -> StepRecord | None:
        return await get_step_record(self.runs, self.run_id, self.step_id)

    async def refresh(self) -> None:
        """A plain read of the record: what changed before the subscription, or while
        the connection was away."""
        fresh = await self._read()
        if fresh is not None:
            self.queue.put_nowait(fresh)


def setup_routes(app: web.Application) -> None:
    app.router.add_get("/api/runs/{run}/steps/{step}", get_step)
    app.router.add_get("/api/runs/{run}/steps/{step}/logs", get_logs)
