"""Log messages as the HTTP API's lines: decoding, cursors and times. Pure: no I/O.

**Writers.** A runner may write log lines under its own name for any attempt (the server
checks the name, not the attempt), so a reader shows an attempt's lines only from the runner
recorded for it, with the orchestrator's notes and the logs from before writers were named
(``shown``).

**Cursors.** A line's cursor is ``stream sequence * CURSOR_SPAN + index within its
message``: unique, increasing in the order the server stored the lines, and opaque to
clients. A message holds at most 4,000 lines (``MAX_CHUNK_LINES``), so the index fits.
``after=C`` replays from the message of ``C`` on and skips its lines up to ``C``: it
resumes at the next line, in the middle of a message if need be.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import msgspec
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepRecord, chunk_texts, log_line_decoder
from heddle.shared.wire.names import LOG_SEQ_HEADER as SEQ_HEADER
from heddle.shared.wire.names import LOG_STREAM_HEADER as STREAM_HEADER
from heddle.shared.wire.timefmt import from_epoch

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Msg

CURSOR_SPAN = 4096  # cursor = stream sequence * CURSOR_SPAN + index within the message
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MILLISECOND = timedelta(milliseconds=1)


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


class Clock:
    """Stream timestamps as RFC 3339, formatted once per millisecond."""

    __slots__ = ("ms", "text")

    def __init__(self) -> None:
        self.ms = -1
        self.text = ""

    def __call__(self, stored: datetime) -> str:
        ms = (stored - EPOCH) // MILLISECOND
        if ms != self.ms:
            self.ms, self.text = ms, from_epoch(ms / 1000)
        return self.text


def decode(data: bytes, headers: dict[str, str] | None = None) -> tuple[str, int, list[str]]:
    """A message as (stream, seq of its first line, lines): a chunk of output (raw lines,
    its stream and first line's number in headers) or a JSON note."""
    if headers and (first := headers.get(SEQ_HEADER)) is not None:
        texts = chunk_texts(data)
        stream = headers.get(STREAM_HEADER) or "stdout"
        seq = int(first) if first.isdigit() else 0
    else:
        try:
            rec = log_line_decoder.decode(data)
        except msgspec.DecodeError:  # published by someone else: show it as it is
            return "unknown", 0, [data.decode("utf-8", errors="replace")]
        stream, seq, texts = rec.stream, rec.seq, rec.texts()
    if len(texts) > CURSOR_SPAN:  # not the runner's (it sends 4,000 at most)
        texts = texts[:CURSOR_SPAN]
    return stream, seq, texts


# Whether a log message's subject is shown: True, False, or None while its attempt's runner
# is not known yet.
Verdict = Callable[[str], bool | None]


def attempt_runners(step: StepRecord) -> dict[int, str]:
    """The runner recorded for each of a step's attempts that has one."""
    out = {rec.attempt: rec.runner for rec in step.attempts if rec.runner}
    if step.runner and step.attempt not in out:
        out[step.attempt] = step.runner
    return out


def shown(subject: str, runners: Mapping[int, str]) -> bool | None:
    """Whether a log message is shown: the orchestrator's notes, a log from before writers
    were named, and the lines of the runner recorded for its attempt (None: none is yet)."""
    attempt, writer = names.log_writer(subject)
    if writer is None or writer == names.NOTES_WRITER:
        return True
    runner = runners.get(attempt)
    return None if runner is None else writer == runner


def parse_message(msg: Msg, clock: Clock, after: int = 0) -> tuple[list[Line], int]:
    """A delivered message as its lines with a cursor above ``after``, and the consumer's
    count of messages still pending. The stream sequence, time and pending count are the
    message's JetStream metadata."""
    meta = msg.metadata
    attempt = max(names.log_writer(msg.subject)[0], 0)
    stream, seq, texts = decode(msg.data, msg.headers)
    base = meta.sequence.stream * CURSOR_SPAN
    time = clock(meta.timestamp)
    first = after - base + 1 if after >= base else 0
    lines = [
        Line(base + j, attempt, seq + j if seq > 0 else 0, stream, time, texts[j])
        for j in range(first, len(texts))
    ]
    return lines, meta.num_pending or 0
