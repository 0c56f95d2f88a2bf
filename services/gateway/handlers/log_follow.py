"""``GET /api/runs/{run}/steps/{step}/logs?follow=1``: a step's lines as server-sent events,
live as they are written: every line as a ``data:`` event with ``id:`` its cursor, a
``status`` event when the step changes state, and a final ``end`` event with the terminal
state once the step is terminal and its last line was sent (logs.py reads the request).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web
from heddle.services.gateway.http import sse
from heddle.services.gateway.http.keys import RESOURCES
from heddle.services.gateway.reads.log_index import last_cursor
from heddle.services.gateway.reads.log_lines import attempt_runners, encode_json, shown
from heddle.services.gateway.reads.log_reader import DRAIN_WAIT, KEEPALIVE, Feed
from heddle.services.gateway.reads.progress import StepProgress, step_progress
from heddle.services.gateway.reads.runs import get_step_record, stored_when
from heddle.shared.broker.kv_changes import KeyChanges
from heddle.shared.wire import names
from heddle.shared.wire.contracts import TERMINAL_STEP, StepRecord, step_record_decoder

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket
    from heddle.shared.broker.nats_types import JetStreamContext


RUNNER_READS, RUNNER_WAIT = 20, 0.05  # reads of a step record that names no runner yet


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
    heddle-runs (shared/broker/kv_changes.py), read again after subscribing and at every
    keepalive (in case the connection dropped meanwhile)."""
    runs = request.app[RESOURCES].runs
    states = _StepStates(js, runs, run_id, step, subject)
    verdict = lambda subj: shown(subj, states.runners)  # noqa: E731
    feed = await Feed(js, subject, after, verdict, states.learn_runner).start()
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
        self.runners = attempt_runners(step)  # whose lines are shown (log_lines.shown)

    def live(self, feed: Feed) -> Callable[[str, bytes], None]:
        """What takes the record's puts: queued, and the line reader woken to tell them."""

        def put(_key: str, value: bytes) -> None:
            with contextlib.suppress(msgspec.DecodeError):
                rec = step_record_decoder.decode(value)
                self.runners.update(attempt_runners(rec))
                self.queue.put_nowait(rec)
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

    async def learn_runner(self, subject: str) -> None:
        """A line came for an attempt whose runner is not known yet: its runner's first
        lines may be stored before the record naming it. Read the record until it names
        one, a little while at most; until then the line is not shown."""
        attempt, _ = names.log_writer(subject)
        for _ in range(RUNNER_READS):
            fresh = await self._read()
            if fresh is not None:
                self.runners.update(attempt_runners(fresh))
            if attempt in self.runners:
                return
            await asyncio.sleep(RUNNER_WAIT)

    async def refresh(self) -> None:
        """A plain read of the record: what changed before the subscription, or while
        the connection was away."""
        fresh = await self._read()
        if fresh is not None:
            self.queue.put_nowait(fresh)
