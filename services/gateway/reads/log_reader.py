"""Reading a step's log lines from HEDDLE_LOGS: a feed of lines as they are stored, and
replays of a range of them in batches. No HTTP here (services/gateway/handlers/logs.py serves it).

A message holds one line or a chunk of lines (``LogLine``; docs/logs.md). Every read of
lines is one filtered replay of the step's subjects, never a request per line or per
message: a pull consumer for a range of lines (``replay``), an ordered push consumer for
lines followed live (``Feed``).

Cursors and the decoding of messages are in ``log_lines.py``; counts and tails in
``log_index.py`` (found without reading an attempt) and ``log_tail.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from heddle.services.gateway.reads.log_index import forget, pull_consumer
from heddle.services.gateway.reads.log_lines import (
    Clock,
    Line,
    Verdict,
    cursor_of,
    parse_message,
    start_of,
)
from heddle.shared.broker.nats_types import ConsumerConfig, DeliverPolicy
from heddle.shared.wire import names

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import JetStreamContext, Msg

log = logging.getLogger("heddle.gateway")

DEFAULT_TAIL = 1000  # lines per attempt in the step document when ?tail is not given
MAX_TAIL = 1_000_000
KEEPALIVE = 15.0  # seconds between SSE comments while nothing happens (proxies, dead peers)
DRAIN_WAIT = 5.0  # after the step ended, how long its last lines may take to arrive
# Messages a Feed buffers, still undecoded (a chunk is 64 KiB at most, its lines as objects
# several times that): a slow client slows its consumer, no more.
QUEUE_MESSAGES = 64
BATCH = 1000  # lines per write to the client, about
FETCH = 16  # messages per pull request of a replay (a chunk is 64 KiB at most)
FETCH_WAIT = 5.0  # seconds a replay's pull waits for messages the stream said it has
# Seconds a replay's consumer outlives its last pull: as long as a slow client may take
# to read a batch, since the replay pulls again only once the batch is written.
REPLAY_IDLE = 300.0


# ---- replays ------------------------------------------------------------------------------


class Feed:
    """An ordered replay of ``subject``'s lines after cursor ``after``, live from then on
    (the SSE of services/gateway/handlers/logs.py): the messages land in a bounded queue, so a slow
    reader holds the consumer back (flow control) instead of piling lines up here."""

    def __init__(
        self,
        js: JetStreamContext,
        subject: str,
        after: int = 0,
        verdict: Verdict | None = None,
        resolve: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.js = js
        self.subject = subject
        self.after = after
        # Which messages are shown (log_lines.shown); ``resolve`` learns more when it cannot
        # tell yet (the runner's first lines may come before its attempt's record names it).
        self.verdict = verdict
        self.resolve = resolve
        self.queue: asyncio.Queue[Msg | None] = asyncio.Queue(QUEUE_MESSAGES)
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
        await self.queue.put(msg)

    async def stop(self) -> None:
        """Unsubscribed, and its consumer deleted: an ordered consumer outlives its
        subscription on the server for minutes, and many followers piled them up."""
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(Exception):  # the connection may be gone
                forget(self.js, (await sub.consumer_info()).name)
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
                got, pending = parse_message(item, self._clock, self.after)
                if await self._shown(item.subject):
                    lines.extend(got)
            if len(lines) >= BATCH:
                break
            try:
                item = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                break
        return lines, pending

    async def _shown(self, subject: str) -> bool:
        if self.verdict is None:
            return True
        verdict = self.verdict(subject)
        if verdict is None and self.resolve is not None:
            await self.resolve(subject)
            verdict = self.verdict(subject)
        return verdict is True


async def replay(
    js: JetStreamContext,
    subject: str,
    after: int,
    end: int,
    verdict: Verdict | None = None,
) -> AsyncGenerator[list[Line], None]:
    """The lines on ``subject`` after cursor ``after`` up to cursor ``end``, in batches of
    about ``BATCH`` as they are read (close it, e.g. with ``contextlib.aclosing``, to stop
    at once when leaving early).

    A pull consumer, asked for ``FETCH`` messages at a time and never more than remain:
    the reader holds that many messages at most, whatever the log's size, and the server
    sends nothing it was not asked for (a push consumer's flow control lets a fast reader
    have 32 MiB in flight, and a connection carrying several past 64 MiB is cut as a slow
    consumer). A NATS timeout is raised; lines gone meanwhile (retention) end it early.
    With ``verdict``, only the messages it shows (log_lines.shown; undecided is not shown)."""
    if end <= after:
        return
    info = await pull_consumer(js, subject, start_of(after), REPLAY_IDLE)
    sub = await js.pull_subscribe_bind(info.name, names.LOGS_STREAM)
    lines: list[Line] = []
    clock, want = Clock(), 1  # one first: how many remain comes with it
    try:
        while want:
            try:
                msgs = await sub.fetch(want, timeout=FETCH_WAIT)
            except TimeoutError:
                if (await sub.consumer_info()).num_pending == 0:
                    break  # the rest expired meanwhile
                raise
            for msg in msgs:
                got, want = parse_message(msg, clock, after)
                if verdict is not None and verdict(msg.subject) is not True:
                    got = []
                    if cursor_of(msg.metadata.sequence.stream + 1) > end:
                        want = 0  # not shown, and it reaches the end
                        break
                if got and got[-1].cursor >= end:
                    lines += [x for x in got if x.cursor <= end]
                    want = 0
                    break
                lines += got
                if len(lines) >= BATCH:
                    yield lines
                    lines = []
            want = min(want, FETCH)
        if lines:
            yield lines
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        forget(js, info.name)


async def read_lines(
    js: JetStreamContext, subject: str, after: int, end: int, verdict: Verdict | None = None
) -> list[Line]:
    """Every line on ``subject`` after cursor ``after`` up to cursor ``end`` (that
    ``verdict`` shows)."""
    lines: list[Line] = []
    async with contextlib.aclosing(replay(js, subject, after, end, verdict)) as batches:
        async for batch in batches:
            lines.extend(batch)
    return lines
