"""The ``logs`` of the step document: each attempt's line count and its last N lines,
located first (a few single-message reads and counts, no lines read; log_index.py has the
method), then replayed in batches while they are written to the client, never held whole.

A located tail starts at a message, not a line: the replay may begin with lines before the
tail, and ``skip`` says how many (the start of the chunk holding the tail's first line,
and the orchestrator's notes among the runner's chunks after it, which the tail counts).
For an attempt still being written, the count and the tail's start are a snapshot of a few
requests: lines written meanwhile can make the tail a few lines longer or shorter.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING

from heddle.services.gateway.reads.log_index import (
    AttemptLogs,
    Stored,
    attempt_messages,
    holding,
    last_message,
    message_at,
    notes_between,
    nth_last,
    runner_at,
)
from heddle.services.gateway.reads.log_lines import (
    Line,
    Verdict,
    attempt_runners,
    cursor_of,
    shown,
)
from heddle.services.gateway.reads.log_reader import BATCH, read_lines, replay
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepRecord

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import JetStreamContext

SMALL_ATTEMPT = 8  # messages: an attempt this small is simply read whole


@dataclass(slots=True)
class AttemptTail:
    """An attempt's count and where its last ``tail`` lines are."""

    attempt: int
    subject: str
    tail: int
    count: int = 0  # lines stored
    last: int = 0  # the cursor of the last one; 0 if none
    first_seq: int | None = None  # the runner's number of its first line still stored
    after: int = 0  # the replay starts after this cursor
    skip: int = 0  # lines at the start of the replay that are before the tail
    lines: list[Line] | None = None  # the tail itself, when the attempt was read whole
    expired: bool = False  # it ran, and its lines are gone, all of them or the first
    verdict: Verdict | None = None  # which of the subject's messages are shown (all: None)


async def locate(
    js: JetStreamContext,
    run_id: str,
    step_id: str,
    attempt: int,
    logs: AttemptLogs,
    tail: int,
    runners: dict[int, str],
) -> AttemptTail:
    """An attempt's line count and where its last ``tail`` lines start (``logs``: its
    messages in the stream; ``runners``: the runner of each attempt). An attempt another
    runner also wrote under, or written in both forms, is read whole, showing only its own
    runner's lines."""
    messages = logs.messages
    out = AttemptTail(attempt, logs.subject(run_id, step_id, attempt), tail)
    whole = logs.hidden or logs.mixed
    if whole:
        out.verdict = lambda subj: names.log_writer(subj)[0] == attempt and shown(subj, runners)
    if messages == 0:
        return out
    last = await last_message(js, out.subject)
    if last is None:
        return out
    out.last = end = last.last_cursor
    if messages <= SMALL_ATTEMPT or whole:
        lines = await read_lines(js, out.subject, 0, end, out.verdict)
        out.last = lines[-1].cursor if lines else 0
        out.count = len(lines)
        out.first_seq = min((x.seq for x in lines if x.seq > 0), default=None)
        out.lines = lines[-tail:] if tail else []
        return out
    head = await message_at(js, out.subject, 1)
    if head is None:
        return AttemptTail(attempt, out.subject, tail)
    span = await _runner_span(js, out.subject, head, last, messages)
    out.count = count = messages + span.extra
    out.first_seq = span.first.seq if span.first is not None else None
    if tail == 0:
        return out
    start, skip = head.sseq, 0
    if count > tail:
        start, skip = await _tail_start(js, out.subject, head, last, span, messages, tail)
    out.after, out.skip = cursor_of(start) - 1, skip
    return out


@dataclass(slots=True)
class _Span:
    """Where the runner's lines are among an attempt's messages."""

    first: Stored | None  # the runner's first message
    final: Stored | None  # its last, behind the orchestrator's notes that follow it
    behind: int  # how many notes follow it
    starts: list[int]  # starts[k]: where the k+1 last messages are
    extra: int = 0  # lines beyond one per message

    @property
    def runner(self) -> bool:
        return self.first is not None and self.final is not None and self.final.runner


async def _runner_span(
    js: JetStreamContext, subject: str, head: Stored, last: Stored, messages: int
) -> _Span:
    first = head if head.runner else await runner_at(js, subject, head.sseq + 1, last.sseq)
    span = _Span(first, None, 0, [last.sseq])
    if first is not None:
        span.final = last
        while not span.final.runner and span.behind + 2 <= messages:
            span.behind += 1
            span.starts.append(await nth_last(js, subject, head.sseq, last.sseq, span.behind + 1))
            found = await message_at(js, subject, span.starts[-1])
            if found is None:
                break
            span.final = found
    if span.runner and first is not None and span.final is not None:
        final = span.final
        if first.number is not None and final.number is not None:
            runner_lines = final.seq + final.lines - first.seq
            runner_messages = final.number - first.number + 1
            span.extra = max(0, runner_lines - runner_messages)
    return span


async def _tail_start(
    js: JetStreamContext,
    subject: str,
    head: Stored,
    last: Stored,
    span: _Span,
    messages: int,
    tail: int,
) -> tuple[int, int]:
    """Where the last ``tail`` of more lines start: the stream sequence to read from and
    how many lines to skip there."""
    if span.extra == 0:  # a line per message: the tail starts at the tail-th last message
        return await nth_last(js, subject, head.sseq, last.sseq, tail), 0
    if tail <= span.behind:  # within the notes after the runner's last message
        return span.starts[tail - 1], 0
    first, final = span.first, span.final
    assert first is not None and final is not None
    target = final.seq + final.lines - (tail - span.behind)  # the first runner line needed
    if target < first.seq:  # notes before or among the runner's lines: read it all
        return head.sseq, messages + span.extra - tail
    found = await holding(js, subject, first, final, target)
    # The orchestrator's notes before the runner's last message, if any, may be among the
    # lines from ``found`` on: the tail counts them.
    notes = messages - span.behind - (final.number or 0) + (first.number or 0) - 1
    among = await notes_between(js, subject, found, final) if notes > 0 else 0
    return found.sseq, target - found.seq + among


async def tail_lines(js: JetStreamContext, where: AttemptTail) -> AsyncGenerator[list[Line], None]:
    """The attempt's last ``where.tail`` lines, in batches of about ``BATCH``, read as they
    are sent (close it, e.g. with ``contextlib.aclosing``, when leaving early)."""
    if where.lines is not None:
        for i in range(0, len(where.lines), BATCH):
            yield where.lines[i : i + BATCH]
        return
    if where.tail == 0 or where.last == 0:
        return
    skip = where.skip
    replayed = replay(js, where.subject, where.after, where.last, where.verdict)
    async with aclosing(replayed) as batches:
        async for batch in batches:
            if skip:
                batch, skip = batch[skip:], max(0, skip - len(batch))
            if batch:
                yield batch


@dataclass(slots=True)
class StepTails:
    """The ``logs`` of the step document, located: its groups, oldest attempt first."""

    attempts: list[AttemptTail]
    cursor: int  # the step's last line's
    expired: bool  # it ran, and none of its lines are left


async def locate_step(js: JetStreamContext, step: StepRecord, run_id: str, tail: int) -> StepTails:
    runners = attempt_runners(step)
    messages = await attempt_messages(js, run_id, step.id, runners)
    ran = {rec.attempt for rec in step.attempts}
    attempts = sorted({a for a, logs in messages.items() if logs.messages} | ran)
    found = await asyncio.gather(
        *(
            locate(js, run_id, step.id, a, messages.get(a, AttemptLogs()), tail, runners)
            for a in attempts
        )
    )
    for where in found:
        # Lines that ran but are gone: all of them, or the first (a runner numbers from 1).
        gone = where.count == 0 and where.attempt in ran
        where.expired = gone or (where.first_seq or 1) > 1
    cursor = max((where.last for where in found), default=0)
    stored = any(logs.messages for logs in messages.values())
    return StepTails(list(found), cursor, bool(ran) and not stored)


async def read_attempt(
    js: JetStreamContext,
    run_id: str,
    step_id: str,
    attempt: int,
    logs: AttemptLogs,
    tail: int,
    runners: dict[int, str],
) -> AttemptTail:
    """An attempt located and its tail read whole into ``lines`` (for a caller that wants a
    list, not a stream)."""
    where = await locate(js, run_id, step_id, attempt, logs, tail, runners)
    if where.lines is None:
        lines: list[Line] = []
        async with aclosing(tail_lines(js, where)) as batches:
            async for batch in batches:
                lines.extend(batch)
        where.lines = lines
    return where
