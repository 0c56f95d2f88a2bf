"""Step logs over HTTP: a step with its lines grouped by attempt, the lines as JSON, and the
lines followed live as server-sent events.

Lines live in HEDDLE_LOGS, one message per line on ``heddle.log.<run>.<step>.<attempt>``
(docs/logs.md). Every read is one filtered, ordered replay of the step's subjects (an
ordered push consumer), never a request per line. A line's ``cursor`` is its stream
sequence: global, increasing, and the order the server stored the lines in, which is the
order they were written (the runner's and the orchestrator's alike). ``?after=CURSOR`` and
the SSE ``Last-Event-ID`` resume after it.

- ``GET /api/runs/{run}/steps/{step}[?tail=N]``: the step as in the run document, plus
  ``logs``: one group per attempt, oldest first, each with its last N lines (default
  ``DEFAULT_TAIL``, at most ``MAX_TAIL``), ``lineCount`` and ``truncated``.
- ``GET /api/runs/{run}/steps/{step}/logs[?after=C]``: every line after C, then the end.
- ``...?follow=1``: ``text/event-stream``; every line as a ``data:`` event with ``id:`` its
  cursor, live as it is written, a ``status`` event when the step changes state, and a
  final ``end`` event with the terminal state once the step is terminal and its last line
  was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from aiohttp import web
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from services.gateway.keys import RESOURCES
from services.gateway.reads import get_run_record, step_document
from services.gateway.views import error, json_response, path_id
from shared import names
from shared.contracts import TERMINAL_STEP, StepRecord, log_line_decoder, step_record_decoder
from shared.timefmt import from_epoch

log = logging.getLogger("heddle.gateway")

DEFAULT_TAIL = 1000  # lines per attempt in the step document when ?tail is not given
MAX_TAIL = 1_000_000
KEEPALIVE = 15.0  # seconds between SSE comments while nothing happens (proxies, dead peers)
DRAIN_WAIT = 5.0  # after the step ended, how long its last lines may take to arrive
QUEUE_LINES = 4096  # lines buffered per reader; a slow client slows its consumer, no more
BATCH = 1000  # lines per write to the client


class Line(msgspec.Struct):
    """One line as the HTTP API shows it."""

    cursor: int  # stream sequence in HEDDLE_LOGS
    attempt: int
    seq: int  # the runner's per-attempt sequence; 0 for the orchestrator's notes
    stream: str  # stdout, stderr or heddle
    time: str  # when the server stored it (RFC 3339, UTC, milliseconds)
    text: str


_encode = msgspec.json.Encoder().encode


class _Clock:
    """Stream timestamps (ns) as RFC 3339, formatted once per millisecond."""

    __slots__ = ("ms", "text")

    def __init__(self) -> None:
        self.ms = -1
        self.text = ""

    def __call__(self, ns: int) -> str:
        ms = ns // 1_000_000
        if ms != self.ms:
            self.ms, self.text = ms, from_epoch(ms / 1000)
        return self.text


def parse_line(msg: Msg, clock: _Clock) -> tuple[Line, int]:
    """A delivered message as a line, and the consumer's count of messages still pending.
    The stream sequence, time and pending count come from the reply subject
    (``$JS.ACK.[<domain>.<hash>.]<stream>.<consumer>.<n>.<sseq>.<cseq>.<ns>.<pending>``)."""
    tokens = msg.reply.split(".")
    i = 5 if len(tokens) == 9 else 7
    attempt = msg.subject.rsplit(".", 1)[1]
    try:
        rec = log_line_decoder.decode(msg.data)
        stream, seq, text = rec.stream, rec.seq, rec.text
    except msgspec.DecodeError:  # published by someone else: show it as it is
        stream, seq, text = "unknown", 0, msg.data.decode("utf-8", errors="replace")
    line = Line(
        cursor=int(tokens[i]),
        attempt=int(attempt) if attempt.isdigit() else 0,
        seq=seq,
        stream=stream,
        time=clock(int(tokens[i + 2])),
        text=text,
    )
    return line, int(tokens[i + 3])


# ---- reading the stream ------------------------------------------------------------------


async def last_cursor(js: JetStreamContext, subject: str) -> int:
    """The stream sequence of the last line on ``subject`` (wildcards allowed), 0 if none."""
    try:
        return (await js.get_msg(names.LOGS_STREAM, subject=subject)).seq or 0
    except NotFoundError:
        return 0


async def first_cursor(js: JetStreamContext, subject: str) -> int:
    try:
        return (await js.get_msg(names.LOGS_STREAM, seq=1, subject=subject, next=True)).seq or 0
    except NotFoundError:
        return 0


async def attempt_counts(js: JetStreamContext, run_id: str, step_id: str) -> dict[int, int]:
    """Lines stored per attempt: one stream-info request filtered on the step's subjects."""
    info = await js.stream_info(
        names.LOGS_STREAM, subjects_filter=names.log_step_filter(run_id, step_id)
    )
    out: dict[int, int] = {}
    for subject, count in (info.state.subjects or {}).items():
        attempt = subject.rsplit(".", 1)[1]
        if attempt.isdigit():
            out[int(attempt)] = out.get(int(attempt), 0) + count
    return out


class Feed:
    """An ordered replay of ``subject`` from cursor ``after + 1``, live from then on: the
    lines land in a bounded queue, so a slow reader holds the consumer back (flow control)
    instead of piling lines up here."""

    def __init__(self, js: JetStreamContext, subject: str, after: int = 0) -> None:
        self.js = js
        self.subject = subject
        self.after = after
        self.queue: asyncio.Queue[tuple[Line, int] | None] = asyncio.Queue(QUEUE_LINES)
        self._clock = _Clock()
        self._sub: Any = None

    async def start(self) -> Feed:
        if self.after > 0:
            policy = DeliverPolicy.BY_START_SEQUENCE
            config = ConsumerConfig(opt_start_seq=self.after + 1)
        else:
            policy, config = DeliverPolicy.ALL, ConsumerConfig()
        self._sub = await self.js.subscribe(
            self.subject,
            stream=names.LOGS_STREAM,
            cb=self._on_msg,
            ordered_consumer=True,
            deliver_policy=policy,
            config=config,
        )
        return self

    async def _on_msg(self, msg: Msg) -> None:
        await self.queue.put(parse_line(msg, self._clock))

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def batch(self, timeout: float | None) -> list[tuple[Line, int]]:
        """The next lines: waits for one (raises TimeoutError), then takes what is queued."""
        first = await asyncio.wait_for(self.queue.get(), timeout)
        out = [first] if first is not None else []
        while len(out) < BATCH:
            try:
                item = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            if item is not None:
                out.append(item)
        return out

    async def until(self, end: int) -> AsyncIterator[list[Line]]:
        """Lines up to cursor ``end`` (a snapshot of the last one), in batches. Stops early
        if the consumer has nothing left (lines expired meanwhile)."""
        if end <= self.after:
            return
        while True:
            try:
                items = await self.batch(DRAIN_WAIT)
            except TimeoutError:
                if await self._drained():
                    return
                continue
            if not items:
                continue
            lines = [line for line, _ in items]
            yield lines
            if lines[-1].cursor >= end or items[-1][1] == 0:
                return

    async def _drained(self) -> bool:
        try:
            info = await self._sub.consumer_info()
        except Exception:
            return True
        return info.num_pending == 0 and self.queue.empty()


async def pending_from(js: JetStreamContext, subject: str, start: int) -> int:
    """How many lines on ``subject`` have a cursor >= ``start``: the num_pending of a pull
    consumer created there (and deleted at once); the server counts, nothing is delivered."""
    info = await js.add_consumer(
        names.LOGS_STREAM,
        ConsumerConfig(
            filter_subject=subject,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            ack_policy=AckPolicy.NONE,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=10.0,
        ),
    )
    task = asyncio.create_task(js.delete_consumer(names.LOGS_STREAM, info.name))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return info.num_pending


async def tail_start(js: JetStreamContext, subject: str, first: int, last: int, n: int) -> int:
    """The cursor of the n-th last line on ``subject`` (which holds more than n lines between
    cursors ``first`` and ``last``): a binary search on counts, one request per probe, so a
    tail of a 200,000-line attempt replays n lines, not 200,000."""
    hi = last - n + 1  # at most n lines from here on
    if await pending_from(js, subject, hi) >= n:
        return hi  # the usual case: the attempt's last n lines are contiguous in the stream
    lo, hi = first, hi - 1
    while lo < hi:  # the largest start with at least n lines from it
        mid = (lo + hi + 1) // 2
        if await pending_from(js, subject, mid) >= n:
            lo = mid
        else:
            hi = mid - 1
    return lo


async def read_attempt(
    js: JetStreamContext, run_id: str, step_id: str, attempt: int, count: int, tail: int
) -> tuple[list[Line], int]:
    """An attempt's last ``tail`` lines, and the cursor of its last line."""
    subject = names.log(run_id, step_id, attempt)
    last = await last_cursor(js, subject)
    if last == 0 or tail == 0:
        return [], last
    after = 0
    if count > tail:
        first = await first_cursor(js, subject)
        after = await tail_start(js, subject, first, last, tail) - 1
    feed = await Feed(js, subject, after).start()
    lines: list[Line] = []
    try:
        async for batch in feed.until(last):
            lines.extend(batch)
    finally:
        await feed.stop()
    return lines[-tail:], last


async def step_logs(
    js: JetStreamContext, step: StepRecord, run_id: str, tail: int
) -> dict[str, Any]:
    """The ``logs`` part of the step document, grouped by attempt, oldest first."""
    counts = await attempt_counts(js, run_id, step.id)
    ran = {rec.attempt for rec in step.attempts}
    attempts = sorted(set(counts) | ran)
    reads = await asyncio.gather(
        *(read_attempt(js, run_id, step.id, a, counts.get(a, 0), tail) for a in attempts)
    )
    groups = []
    cursor = 0
    for attempt, (lines, last) in zip(attempts, reads, strict=True):
        count = counts.get(attempt, 0)
        cursor = max(cursor, last)
        group: dict[str, Any] = {
            "attempt": attempt,
            "lineCount": count,
            "truncated": count > len(lines),
            "lines": lines,
        }
        # Lines that ran but are gone: all of them, or the first (a runner numbers from 1).
        whole = len(lines) == count and bool(lines)
        runner_seqs = [x.seq for x in lines if x.seq > 0]
        if (count == 0 and attempt in ran) or (whole and runner_seqs and min(runner_seqs) > 1):
            group["expired"] = True
        groups.append(group)
    return {
        "logs": groups,
        "logsCursor": cursor,
        "logsExpired": bool(ran) and not counts,
    }


# ---- HTTP --------------------------------------------------------------------------------


def _bad(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(
        text=msgspec.json.encode({"error": message}).decode(), content_type="application/json"
    )


def int_param(request: web.Request, name: str, default: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) > high:
        raise _bad(f"{name} must be a whole number from 0 to {high}, not {raw!r}")
    return int(raw)


def flag_param(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "").lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise _bad(f"{name} must be 1 or 0 (true or false), not {raw!r}")


async def get_step_record(runs: KeyValue, run_id: str, step_id: str) -> StepRecord | None:
    try:
        entry = await runs.get(names.step_key(run_id, step_id))
    except KeyNotFoundError:
        return None
    if entry is None or not entry.value:
        return None
    return step_record_decoder.decode(entry.value)


async def _lookup(request: web.Request) -> tuple[str, StepRecord] | web.Response:
    run_id = path_id(request, "run", "run id")
    step_id = path_id(request, "step", "step id")
    runs = request.app[RESOURCES].runs
    run, step = await asyncio.gather(
        get_run_record(runs, run_id), get_step_record(runs, run_id, step_id)
    )
    if run is None:
        return error(404, f"run {run_id!r} not found")
    if step is None:
        return error(404, f"run {run_id!r} has no step {step_id!r}")
    return run_id, step


async def heartbeat_at(js: JetStreamContext, run_id: str, step_id: str) -> float | None:
    """When the server stored the step's last heartbeat (epoch seconds), if it has one."""
    bucket = names.HEARTBEATS_BUCKET
    try:
        msg = await js.get_last_msg(
            names.kv_stream(bucket), names.kv_subject(bucket, names.heartbeat_key(run_id, step_id))
        )
    except NotFoundError:
        return None
    return msg.time.timestamp() if msg.time else None


async def get_step(request: web.Request) -> web.Response:
    tail = int_param(request, "tail", DEFAULT_TAIL, MAX_TAIL)
    found = await _lookup(request)
    if isinstance(found, web.Response):
        return found
    run_id, step = found
    js = request.app[RESOURCES].js
    beat = None
    if step.status in ("queued", "running"):
        beat = await heartbeat_at(js, run_id, step.id)
    doc = {"runId": run_id, **step_document(step, beat)}
    doc.update(await step_logs(js, step, run_id, tail))
    return json_response(doc)


async def get_logs(request: web.Request) -> web.StreamResponse:
    follow = flag_param(request, "follow")
    after = int_param(request, "after", 0, 2**63 - 1)
    last_event = request.headers.get("Last-Event-ID", "")
    if follow and last_event.isdigit():
        after = int(last_event)  # an EventSource reconnecting resumes where it was
    found = await _lookup(request)
    if isinstance(found, web.Response):
        return found
    run_id, step = found
    js = request.app[RESOURCES].js
    subject = names.log_step_filter(run_id, step.id)
    if follow:
        return await follow_logs(request, js, run_id, step, subject, after)
    return await dump_logs(request, js, run_id, step, subject, after)


async def dump_logs(
    request: web.Request,
    js: JetStreamContext,
    run_id: str,
    step: StepRecord,
    subject: str,
    after: int,
) -> web.StreamResponse:
    """Every line after ``after`` as one JSON document, written as it is read."""
    end = await last_cursor(js, subject)
    feed = await Feed(js, subject, after).start() if end > after else None
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    head = {"runId": run_id, "stepId": step.id, "status": step.status, "attempt": step.attempt}
    cursor, n = after, 0
    try:
        await resp.prepare(request)
        await resp.write(_encode(head)[:-1] + b',"lines":[')
        if feed is not None:
            async for batch in feed.until(end):
                body = _encode(batch)[1:-1]
                await resp.write(b"," + body if n else body)
                n += len(batch)
                cursor = batch[-1].cursor
        expired = b"true" if step.attempts and end == 0 else b"false"
        await resp.write(b'],"cursor":%d,"logsExpired":%s}' % (cursor, expired))
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client went away
    finally:
        if feed is not None:
            await feed.stop()
    return resp


def _event(kind: str, data: Any) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), _encode(data))


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
    last line was sent. The step's state comes from a watch of its key in heddle-runs
    (checked by a plain read at every keepalive too, in case the watch was lost)."""
    runs = request.app[RESOURCES].runs
    states: asyncio.Queue[StepRecord] = asyncio.Queue()
    states.put_nowait(step)
    feed = await Feed(js, subject, after).start()
    watcher = await runs.watch(names.step_key(run_id, step.id))
    watching = asyncio.create_task(_watch(watcher, states, feed))
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    try:
        await resp.prepare(request)
        cursor, shown = after, ("", -1)
        terminal: StepRecord | None = None
        end = 0
        while True:
            out = bytearray()
            while not states.empty():
                rec = states.get_nowait()
                if terminal is not None:
                    continue
                if (rec.status, rec.attempt) != shown:
                    shown = (rec.status, rec.attempt)
                    out += _event("status", {"status": rec.status, "attempt": rec.attempt})
                if rec.status in TERMINAL_STEP:
                    terminal = rec
                    # The lines of an attempt are stored before the transition that ends
                    # the step is written, so the last one exists now: send up to it.
                    end = await last_cursor(js, subject)
            if out:
                await resp.write(out)
            if terminal is not None and cursor >= end:
                break
            try:
                items = await feed.batch(DRAIN_WAIT if terminal is not None else KEEPALIVE)
            except TimeoutError:
                if terminal is not None:
                    break  # the last lines are gone (expired meanwhile): end anyway
                await resp.write(b": keepalive\n\n")
                fresh = await get_step_record(runs, run_id, step.id)
                if fresh is not None:
                    states.put_nowait(fresh)
                continue
            if items:
                out = bytearray()
                for line, _ in items:
                    out += b"id: %d\ndata: %s\n\n" % (line.cursor, _encode(line))
                cursor = items[-1][0].cursor
                await resp.write(out)
        await resp.write(_event("end", _end(terminal, cursor)))
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client went away
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        with contextlib.suppress(Exception):
            await watcher.stop()
        await feed.stop()
    return resp


async def _watch(watcher: Any, states: asyncio.Queue[StepRecord], feed: Feed) -> None:
    async for entry in watcher:
        if entry is not None and entry.value:
            with contextlib.suppress(msgspec.DecodeError):
                states.put_nowait(step_record_decoder.decode(entry.value))
                with contextlib.suppress(asyncio.QueueFull):  # a full queue wakes it anyway
                    feed.queue.put_nowait(None)  # wake the reader waiting for lines


def setup_routes(app: web.Application) -> None:
    app.router.add_get("/api/runs/{run}/steps/{step}", get_step)
    app.router.add_get("/api/runs/{run}/steps/{step}/logs", get_logs)
