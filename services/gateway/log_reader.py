"""Reading a step's log lines from HEDDLE_LOGS: cursors, per-attempt counts and tails, and
a feed of lines as they are stored. No HTTP here (services/gateway/logs.py serves it).

A message holds one line or a chunk of lines (``LogLine``; docs/logs.md). Every read of
lines is one filtered, ordered replay of the step's subjects (an ordered push consumer),
never a request per line or per message.

**Cursors.** A line's cursor is ``stream sequence * CURSOR_SPAN + index within its
message``: unique, increasing in the order the server stored the lines, and opaque to
clients. A message holds at most 1,000 lines (``MAX_CHUNK_LINES``), so the index fits.
``after=C`` replays from the message of ``C`` on and skips its lines up to ``C``: it
resumes at the next line, in the middle of a message if need be.

**Counts.** An attempt's line count comes from two or three messages, not from reading it:
the stream counts its messages (``M``, one stream-info request for all of a step's
attempts), and every message but a chunk is one line. The runner numbers its lines (its
notes included) 1, 2, 3 ... and its messages too (``Heddle-Msg`` header), so between its
first stored message F and its last L there are ``L.seq + L.lines - F.seq`` lines in
``L.msg - F.msg + 1`` messages; the difference is what chunks add to ``M``. The
orchestrator's notes (seq 0, one line each, anywhere in the attempt) are among the ``M``
messages and are counted exactly, wherever they are. Messages without the header (an older
runner's) are single lines, and the count is ``M``.

**Tails.** The last N lines of an attempt are found without reading the rest: the runner's
line numbers say which line starts the tail, a binary search over stream sequences (one
message fetched per probe) finds the message holding it, and the replay starts there. A
tail of 1,000 lines of a 200,000-line attempt reads about 1,000 lines (and one partial
chunk), not 200,000.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RawStreamMsg
from nats.js.errors import NotFoundError

from shared import names
from shared.contracts import StepRecord, log_line_decoder
from shared.timefmt import from_epoch

log = logging.getLogger("heddle.gateway")

DEFAULT_TAIL = 1000  # lines per attempt in the step document when ?tail is not given
MAX_TAIL = 1_000_000
KEEPALIVE = 15.0  # seconds between SSE comments while nothing happens (proxies, dead peers)
DRAIN_WAIT = 5.0  # after the step ended, how long its last lines may take to arrive
QUEUE_MESSAGES = 64  # messages buffered per reader; a slow client slows its consumer, no more
BATCH = 1000  # lines per write to the client, about
CURSOR_SPAN = 4096  # cursor = stream sequence * CURSOR_SPAN + index within the message
SMALL_ATTEMPT = 8  # messages: an attempt this small is simply read whole
MSG_HEADER = "Heddle-Msg"  # the runner's number of its message (services/runner_agent/output.py)


class Line(msgspec.Struct):
    """One line as the HTTP API shows it."""

    cursor: int  # stream sequence * CURSOR_SPAN + index within the message
    attempt: int
    seq: int  # the runner's per-attempt sequence; 0 for the orchestrator's notes
    stream: str  # stdout, stderr or heddle
    time: str  # when the server stored it (RFC 3339, UTC, milliseconds)
    text: str


encode_json = msgspec.json.Encoder().encode


def cursor_of(sseq: int, index: int = 0) -> int:
    return sseq * CURSOR_SPAN + index


def start_of(after: int) -> int:
    """The stream sequence to replay from to get the lines after cursor ``after``."""
    return (after + 1) // CURSOR_SPAN


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


def decode(data: bytes) -> tuple[str, int, list[str]]:
    """A message body as (stream, seq of its first line, lines)."""
    try:
        rec = log_line_decoder.decode(data)
        texts = rec.texts()
        if len(texts) > CURSOR_SPAN:  # not the runner's (it sends 1,000 at most)
            texts = texts[:CURSOR_SPAN]
        return rec.stream, rec.seq, texts
    except msgspec.DecodeError:  # published by someone else: show it as it is
        return "unknown", 0, [data.decode("utf-8", errors="replace")]


def parse_message(msg: Msg, clock: _Clock, after: int = 0) -> tuple[list[Line], int]:
    """A delivered message as its lines with a cursor above ``after``, and the consumer's
    count of messages still pending. The stream sequence, time and pending count come from
    the reply subject
    (``$JS.ACK.[<domain>.<hash>.]<stream>.<consumer>.<n>.<sseq>.<cseq>.<ns>.<pending>``)."""
    tokens = msg.reply.split(".")
    i = 5 if len(tokens) == 9 else 7
    name = msg.subject.rsplit(".", 1)[1]
    attempt = int(name) if name.isdigit() else 0
    stream, seq, texts = decode(msg.data)
    base = int(tokens[i]) * CURSOR_SPAN
    time = clock(int(tokens[i + 2]))
    first = after - base + 1 if after >= base else 0
    lines = [
        Line(base + j, attempt, seq + j if seq > 0 else 0, stream, time, texts[j])
        for j in range(first, len(texts))
    ]
    return lines, int(tokens[i + 3])


# ---- single messages ----------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Stored:
    """One stored message, as counts and tails need it."""

    sseq: int  # stream sequence
    seq: int  # the first line's number; 0 for the orchestrator's notes
    lines: int  # how many lines it holds
    number: int | None  # the runner's number of the message (its Heddle-Msg header)

    @property
    def runner(self) -> bool:
        return self.seq > 0

    @property
    def last_cursor(self) -> int:
        return cursor_of(self.sseq, max(self.lines, 1) - 1)


def _stored(raw: RawStreamMsg) -> Stored:
    _, seq, texts = decode(raw.data or b"")
    number = (raw.headers or {}).get(MSG_HEADER)
    return Stored(
        raw.seq or 0, seq, len(texts), int(number) if number and number.isdigit() else None
    )


async def message_at(js: JetStreamContext, subject: str, sseq: int) -> Stored | None:
    """The first message on ``subject`` at or after stream sequence ``sseq``."""
    try:
        raw = await js.get_msg(names.LOGS_STREAM, seq=max(sseq, 1), subject=subject, next=True)
    except NotFoundError:
        return None
    return _stored(raw)


async def last_message(js: JetStreamContext, subject: str) -> Stored | None:
    """The last message on ``subject`` (wildcards allowed)."""
    try:
        return _stored(await js.get_last_msg(names.LOGS_STREAM, subject))
    except NotFoundError:
        return None


async def last_cursor(js: JetStreamContext, subject: str) -> int:
    """The cursor of the last line on ``subject`` (wildcards allowed), 0 if none."""
    last = await last_message(js, subject)
    return last.last_cursor if last is not None else 0


async def runner_at(js: JetStreamContext, subject: str, sseq: int, until: int) -> Stored | None:
    """The runner's first message at or after ``sseq`` and not after ``until``, stepping
    over the orchestrator's notes (a few per attempt)."""
    while sseq <= until:
        found = await message_at(js, subject, sseq)
        if found is None or found.sseq > until:
            return None
        if found.runner:
            return found
        sseq = found.sseq + 1
    return None


async def attempt_messages(js: JetStreamContext, run_id: str, step_id: str) -> dict[int, int]:
    """Messages stored per attempt: one stream-info request filtered on the step's
    subjects."""
    info = await js.stream_info(
        names.LOGS_STREAM, subjects_filter=names.log_step_filter(run_id, step_id)
    )
    out: dict[int, int] = {}
    for subject, count in (info.state.subjects or {}).items():
        attempt = subject.rsplit(".", 1)[1]
        if attempt.isdigit():
            out[int(attempt)] = out.get(int(attempt), 0) + count
    return out


async def pending_from(js: JetStreamContext, subject: str, start: int) -> int:
    """How many messages on ``subject`` have a stream sequence >= ``start``: the
    num_pending of a pull consumer created there (and deleted at once); the server counts,
    nothing is delivered."""
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


async def nth_last(js: JetStreamContext, subject: str, first: int, last: int, n: int) -> int:
    """A stream sequence from which ``subject`` (messages from ``first`` to ``last``, more
    than n of them) holds exactly its n last messages: a binary search on counts, one
    request per probe."""
    hi = last - n + 1  # at most n messages from here on
    if await pending_from(js, subject, hi) >= n:
        return hi  # the usual case: the last n messages are contiguous in the stream
    lo, hi = first, hi - 1
    while lo < hi:  # the largest start with at least n messages from it
        mid = (lo + hi + 1) // 2
        if await pending_from(js, subject, mid) >= n:
            lo = mid
        else:
            hi = mid - 1
    return lo


async def holding(
    js: JetStreamContext, subject: str, first: Stored, last: Stored, target: int
) -> Stored:
    """The runner's message holding its line ``target`` (from ``first`` to ``last``, its
    first and last stored messages): a binary search over stream sequences on the line
    numbers, one message fetched per probe."""
    if last.seq <= target:
        return last
    best, lo, hi = first, first.sseq, last.sseq
    while lo < hi:
        mid = (lo + hi + 1) // 2
        found = await runner_at(js, subject, mid, last.sseq)
        if found is not None and found.seq <= target:
            best, lo = found, found.sseq
        else:
            hi = mid - 1
    return best


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
        self._clock = _Clock()
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
