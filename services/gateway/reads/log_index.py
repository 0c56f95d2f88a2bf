"""Where an attempt's lines are in HEDDLE_LOGS, found without reading them: single
messages fetched by stream sequence, counts of messages from a sequence on, and binary
searches over both.

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
chunk, of at most 4,000), not 200,000.

"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from heddle.services.gateway.reads.log_lines import cursor_of, decode, shown
from heddle.shared.broker.nats_types import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    NotFoundError,
    RawStreamMsg,
)
from heddle.shared.wire import names

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import JetStreamContext

MSG_HEADER = names.LOG_MSG_HEADER


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
    _, seq, texts = decode(raw.data or b"", raw.headers)
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


@dataclass(slots=True)
class AttemptLogs:
    """The subjects of one attempt's log in the stream, as one stream-info request lists
    them: those shown (log_lines.shown) and their message count, and whether any other
    runner wrote under the attempt."""

    messages: int = 0
    subjects: list[str] = field(default_factory=list)
    hidden: bool = False

    @property
    def mixed(self) -> bool:
        """Whether the attempt was written in both forms (across an upgrade)."""
        legacy = [s for s in self.subjects if names.log_writer(s)[1] is None]
        return bool(legacy) and len(legacy) < len(self.subjects)

    def subject(self, run_id: str, step_id: str, attempt: int) -> str:
        """Where the attempt's shown messages are: their one subject, else every writer's,
        else (``mixed``) the step's; a reader then shows only what ``shown`` does of the
        attempt, when ``hidden`` or ``mixed``."""
        if len(self.subjects) == 1:
            return self.subjects[0]
        if self.mixed:
            return names.log_step_filter(run_id, step_id)
        return names.log_attempt_filter(run_id, step_id, attempt)


async def attempt_messages(
    js: JetStreamContext, run_id: str, step_id: str, runners: Mapping[int, str]
) -> dict[int, AttemptLogs]:
    """Messages stored per attempt: one stream-info request filtered on the step's
    subjects (both forms), told apart by writer (``runners``: each attempt's runner)."""
    info = await js.stream_info(
        names.LOGS_STREAM, subjects_filter=names.log_step_filter(run_id, step_id)
    )
    out: dict[int, AttemptLogs] = {}
    for subject, count in (info.state.subjects or {}).items():
        attempt, _ = names.log_writer(subject)
        if attempt < 0:
            continue
        logs = out.setdefault(attempt, AttemptLogs())
        if shown(subject, runners):
            logs.messages += count
            logs.subjects.append(subject)
        else:
            logs.hidden = True
    return out


async def pull_consumer(
    js: JetStreamContext, subject: str, start: int, idle: float = 10.0
) -> ConsumerInfo:
    """A pull consumer of ``subject`` from stream sequence ``start`` on, kept in memory,
    acknowledging nothing; the server drops it ``idle`` seconds after its last pull if
    ``forget`` could not."""
    return await js.add_consumer(
        names.LOGS_STREAM,
        ConsumerConfig(
            filter_subject=subject,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(start, 1),
            ack_policy=AckPolicy.NONE,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=idle,
        ),
    )


def forget(js: JetStreamContext, consumer: str) -> None:
    """Delete a consumer without waiting for the answer (nor failing without one)."""
    task = asyncio.create_task(js.delete_consumer(names.LOGS_STREAM, consumer))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


async def pending_from(js: JetStreamContext, subject: str, start: int) -> int:
    """How many messages on ``subject`` have a stream sequence >= ``start``: the
    num_pending of a pull consumer created there (and deleted at once); the server counts,
    nothing is delivered."""
    info = await pull_consumer(js, subject, start)
    forget(js, info.name)
    return info.num_pending or 0  # the server counts at creation: never unset


async def notes_between(js: JetStreamContext, subject: str, a: Stored, b: Stored) -> int:
    """How many of the orchestrator's notes are stored between the runner's messages ``a``
    and ``b``: the messages between them less the runner's (its numbers say how many)."""
    if a.number is None or b.number is None or b.sseq <= a.sseq + 1:
        return 0
    after_a, from_b = await asyncio.gather(
        pending_from(js, subject, a.sseq + 1), pending_from(js, subject, b.sseq)
    )
    return max(0, after_a - from_b - (b.number - a.number - 1))


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
