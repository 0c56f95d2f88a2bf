"""Reading a step's log lines from HEDDLE_LOGS: cursors, per-attempt counts and tails, and
a feed of lines as they are stored. No HTTP here (services/gateway/logs.py serves it).

Every read is one filtered, ordered replay of the step's subjects (an ordered push
consumer), never a request per line. A line's ``cursor`` is its stream sequence: global,
increasing, and the order the server stored the lines in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from shared import names
from shared.contracts import StepRecord, log_line_decoder
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


encode_json = msgspec.json.Encoder().encode


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
