"""Reading a step's log lines from HEDDLE_LOGS: cursors, per-attempt counts and tails, and
a feed of lines as they are stored. No HTTP here (services/gateway/logs.py serves it).

A message holds one line or a chunk of lines (``LogLine``; docs/logs.md). Every read of
lines is one filtered, ordered replay of the step's subjects (an ordered push consumer),
never a request per line or per message.

Cursors and the decoding of messages are in ``log_lines.py``; counts and tails, found
without reading an attempt, in ``log_index.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from services.gateway.log_index import (
    attempt_messages,
    holding,
    last_message,
    message_at,
    nth_last,
    runner_at,
)
from services.gateway.log_lines import (
    Clock,
    Line,
    cursor_of,
    parse_message,
    start_of,
)
from shared import names
from shared.contracts import StepRecord

log = logging.getLogger("heddle.gateway")

DEFAULT_TAIL = 1000  # lines per attempt in the step document when ?tail is not given
MAX_TAIL = 1_000_000
KEEPALIVE = 15.0  # seconds between SSE comments while nothing happens (proxies, dead peers)
DRAIN_WAIT = 5.0  # after the step ended, how long its last lines may take to arrive
QUEUE_MESSAGES = 64  # messages buffered per reader; a slow client slows its consumer, no more
BATCH = 1000  # lines per write to the client, about
SMALL_ATTEMPT = 8  # messages: an attempt this small is simply read whole


# ---- replays ------------------------------------------------------------------------------


class Feed:
    """An ordered replay of ``subject``'s lines after cursor ``after``, live from then on:
    the messages land in a bounded queue, so a slow reader holds the consumer back (flow
    control) instead of piling lines up here."""

    def __init__(self, js: JetStreamContext, subject: str, after: int = 0) -> None:
        self.js = js
        self.subject = subject
        self.after = after
        self.queue: asyncio.Queue[tuple[list[Line], int] | None] = asyncio.Queue(QUEUE_MESSAGES)
        self._clock = Clock()
        self._sub: Any = None

    async def start(self) -> Feed:
        start = start_of(self.after)
        if start > 0:
            policy = DeliverPolicy.BY_START_SEQUENCE
            config = ConsumerConfig(opt_start_seq=start)
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
        await self.queue.put(parse_message(msg, self._clock, self.after))

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def batch(self, timeout: float | None) -> tuple[list[Line], int | None]:
        """The next lines: waits for a message (raises TimeoutError), then takes what is
        queued, about ``BATCH`` lines at most; with the number of messages still pending
        after the last one (None if only a wake-up came)."""
        item = await asyncio.wait_for(self.queue.get(), timeout)
        lines: list[Line] = []
        pending = None
        while True:
            if item is not None:
                lines.extend(item[0])
                pending = item[1]
            if len(lines) >= BATCH:
                break
            try:
                item = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                break
        return lines, pending

    async def until(self, end: int) -> AsyncIterator[list[Line]]:
        """Lines up to cursor ``end`` (a snapshot of the last one), in batches. Stops early
        if the consumer has nothing left (lines expired meanwhile)."""
        if end <= self.after:
            return
        while True:
            try:
                lines, pending = await self.batch(DRAIN_WAIT)
            except TimeoutError:
                if await self._drained():
                    return
                continue
            if lines:
                yield lines
            if (lines and lines[-1].cursor >= end) or pending == 0:
                return

    async def _drained(self) -> bool:
        try:
            info = await self._sub.consumer_info()
        except Exception:
            return True
        return info.num_pending == 0 and self.queue.empty()


async def read_lines(js: JetStreamContext, subject: str, after: int, end: int) -> list[Line]:
    """Every line on ``subject`` after cursor ``after`` up to cursor ``end``."""
    if end <= after:
        return []
    feed = await Feed(js, subject, after).start()
    lines: list[Line] = []
    try:
        async for batch in feed.until(end):
            lines.extend(batch)
    finally:
        await feed.stop()
    return lines


# ---- an attempt's count and tail ----------------------------------------------------------


@dataclass(slots=True)
class AttemptLog:
    count: int  # lines stored
    lines: list[Line]  # the last ``tail`` of them
    last: int  # the cursor of the last one; 0 if none
    first_seq: int | None  # the runner's number of its first line still stored


async def read_attempt(
    js: JetStreamContext, run_id: str, step_id: str, attempt: int, messages: int, tail: int
) -> AttemptLog:
    """An attempt's line count and last ``tail`` lines (``messages``: how many messages the
    stream holds for it; see the module docstring for the method)."""
    subject = names.log(run_id, step_id, attempt)
    if messages == 0:
        return AttemptLog(0, [], 0, None)
    last = await last_message(js, subject)
    if last is None:
        return AttemptLog(0, [], 0, None)
    end = last.last_cursor
    if messages <= SMALL_ATTEMPT:
        lines = await read_lines(js, subject, 0, end)
        seqs = [x.seq for x in lines if x.seq > 0]
        return AttemptLog(len(lines), lines[-tail:] if tail else [], end, min(seqs, default=None))

    head = await message_at(js, subject, 1)
    if head is None:
        return AttemptLog(0, [], 0, None)
    first = head if head.runner else await runner_at(js, subject, head.sseq + 1, last.sseq)
    # The runner's last message, behind the orchestrator's notes that follow it (if any).
    final, behind, starts = None, 0, [last.sseq]  # starts[k]: where the k+1 last messages are
    if first is not None:
        final = last
        while not final.runner and behind + 2 <= messages:
            behind += 1
            starts.append(await nth_last(js, subject, head.sseq, last.sseq, behind + 1))
            found = await message_at(js, subject, starts[-1])
            if found is None:
                break
            final = found
    extra = 0
    if first is not None and final is not None and final.runner:
        if first.number is not None and final.number is not None:
            runner_lines = final.seq + final.lines - first.seq
            runner_messages = final.number - first.number + 1
            extra = max(0, runner_lines - runner_messages)
    count = messages + extra
    first_seq = first.seq if first is not None else None
    if tail == 0:
        return AttemptLog(count, [], end, first_seq)

    if count <= tail:
        start = head.sseq
    elif extra == 0:  # a line per message: the tail starts at the tail-th last message
        start = await nth_last(js, subject, head.sseq, last.sseq, tail)
    elif tail <= behind:  # within the notes after the runner's last message
        start = starts[tail - 1]
    else:
        assert first is not None and final is not None
        target = final.seq + final.lines - (tail - behind)  # the first runner line needed
        if target < first.seq:
            start = head.sseq  # notes before or among the runner's lines: read it all
        else:
            start = (await holding(js, subject, first, final, target)).sseq
    lines = await read_lines(js, subject, cursor_of(start) - 1, end)
    return AttemptLog(count, lines[-tail:], end, first_seq)


async def step_logs(
    js: JetStreamContext, step: StepRecord, run_id: str, tail: int
) -> dict[str, Any]:
    """The ``logs`` part of the step document, grouped by attempt, oldest first."""
    messages = await attempt_messages(js, run_id, step.id)
    ran = {rec.attempt for rec in step.attempts}
    attempts = sorted(set(messages) | ran)
    reads = await asyncio.gather(
        *(read_attempt(js, run_id, step.id, a, messages.get(a, 0), tail) for a in attempts)
    )
    groups = []
    cursor = 0
    for attempt, got in zip(attempts, reads, strict=True):
        cursor = max(cursor, got.last)
        group: dict[str, Any] = {
            "attempt": attempt,
            "lineCount": got.count,
            "truncated": got.count > len(got.lines),
            "lines": got.lines,
        }
        # Lines that ran but are gone: all of them, or the first (a runner numbers from 1).
        if (got.count == 0 and attempt in ran) or (got.first_seq or 1) > 1:
            group["expired"] = True
        groups.append(group)
    return {
        "logs": groups,
        "logsCursor": cursor,
        "logsExpired": bool(ran) and not messages,
    }
