"""A step's output into HEDDLE_LOGS as the command writes it, in chunks of lines.

The complete lines of one pipe read (of stdout or of stderr) go out as one message on the
attempt's log subject, ``{"stream","seq","lines":[...]}`` with ``seq`` the first line's
number (a single line keeps the shape ``{"stream","seq","text"}``; docs/logs.md). A message
per line cost about 5 microseconds of the runner's CPU and 3.5 of the server's, which capped
a chatty command near 145,000 lines/s and made ``seq 1 200000`` take over a second; a chunk
per read keeps the lines as they were written and as live as before (a read returns what
the command has written so far) for about a hundredth of the messages. A chunk holds at
most ``MAX_CHUNK_LINES`` lines and ``MAX_CHUNK_BYTES`` of JSON (a longer line is a message
of its own); a larger read is sent as several messages. A partial line waits for its
newline, or for the command to end.

Messages are core publishes: the stream stores them in order without a round trip each, so
a command that prints fast is not slowed by acknowledgements, and whatever was written to
the socket before a crash is stored. Core messages are not flow-controlled, though, and a
stream drops what arrives while its ingest queue is full (nats-server's
``max_buffered_msgs``, 10,000 messages): an unchecked ``seq 1 200000`` with a message per
line lost 40% of its lines. So once ``CHECKPOINT_MESSAGES`` messages or
``CHECKPOINT_BYTES`` of payload went out since the last checkpoint, the next message (and
the final note, if the command wrote anything) is published with an acknowledgement, and
the next checkpoint waits for the previous one's: a stream stores one connection's messages
in order, so an acknowledged checkpoint means every message before it is stored, and at
most twice those amounts of one attempt are ever in flight.

Every runner message carries a ``Heddle-Msg`` header, its number among the runner's
messages of the attempt (1, 2, 3 ...). With the line numbers it lets a reader count an
attempt's lines exactly from two messages, the orchestrator's notes included
(services/gateway/log_index.py).

A line longer than ``HEDDLE_LOG_LINE_MAX_BYTES`` is split into pieces of at most that many
bytes, cut at a UTF-8 character boundary where there is one; each piece is a line of its own
(with its own ``seq``). Invalid UTF-8 is replaced with U+FFFD, never fatal.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js import JetStreamContext

from shared import names
from shared.contracts import MAX_CHUNK_LINES, LogLine, encode

log = logging.getLogger("heddle.runner")

MAX_CHUNK_BYTES = 64 * 1024  # JSON in one message (a longer line is a message of its own)
CHECKPOINT_MESSAGES = 256
CHECKPOINT_BYTES = 1024 * 1024
CHECKPOINT_WAIT = 2.0  # seconds; past this the lines are not waited for (never fatal)
MSG_HEADER = names.LOG_MSG_HEADER


def cut_point(data: bytes | bytearray, limit: int) -> int:
    """Where to cut ``data`` (longer than ``limit``) into a first piece of at most ``limit``
    bytes without splitting a UTF-8 character; ``limit`` itself if there is no such place."""
    i = limit
    while limit - i < 3 and i > 0 and (data[i] & 0xC0) == 0x80:  # continuation byte
        i -= 1
    if i == 0 or (data[i] & 0xC0) == 0x80:
        return limit
    return i


def _decode(raw: bytes | bytearray) -> str:
    return bytes(raw).decode("utf-8", errors="replace")


def split_long(raw: bytes | bytearray, limit: int) -> list[str]:
    """One line (no newline) as lines of at most ``limit`` bytes, cut between characters."""
    out = []
    while len(raw) > limit:
        cut = cut_point(raw, limit)
        out.append(_decode(raw[:cut]))
        raw = raw[cut:]
    out.append(_decode(raw))
    return out


def has_long_line(block: bytes, limit: int) -> bool:
    """Whether a line of ``block`` (lines without the last newline) is longer than
    ``limit`` bytes: a look for the last newline in each window of ``limit + 1`` bytes, a
    few searches per pipe read instead of one step per line."""
    pos, n = 0, len(block)
    while n - pos > limit:
        nl = block.rfind(b"\n", pos, pos + limit + 1)
        if nl < 0:
            return True  # limit + 1 bytes from a line's start without its end
        pos = nl + 1
    return False


def split_lines(block: bytes, limit: int) -> list[str]:
    """Complete lines as read (``block`` holds them without the last newline) as text: one
    decode of the whole block when no line is longer than ``limit`` bytes (a newline is
    never part of an invalid sequence, so this is the same as decoding line by line)."""
    if has_long_line(block, limit):
        out: list[str] = []
        for raw in block.split(b"\n"):
            if len(raw) > limit:
                out.extend(split_long(raw, limit))
            else:
                out.append(_decode(raw))
        return out
    return block.decode("utf-8", errors="replace").split("\n")


def encode_chunks(
    stream: str,
    seq: int,
    lines: list[str],
    max_lines: int = MAX_CHUNK_LINES,
    max_bytes: int = MAX_CHUNK_BYTES,
) -> list[tuple[bytes, int]]:
    """Lines numbered from ``seq`` as encoded messages, each with its number of lines: at
    most ``max_lines`` lines and ``max_bytes`` of JSON in one (a longer line is a message of
    its own); one line keeps the shape ``{"stream","seq","text"}``."""
    out: list[tuple[bytes, int]] = []

    def add(seq: int, part: list[str]) -> None:
        if len(part) == 1:
            out.append((encode(LogLine(stream=stream, seq=seq, text=part[0])), 1))
            return
        payload = encode(LogLine(stream=stream, seq=seq, lines=part))
        if len(payload) > max_bytes:
            half = len(part) // 2
            add(seq, part[:half])
            add(seq + half, part[half:])
        else:
            out.append((payload, len(part)))

    for i in range(0, len(lines), max_lines):
        add(seq + i, lines[i : i + max_lines])
    return out


# Bytes a JSON string holds as they are: printable ASCII but the quote and the backslash.
_PLAIN = bytes(b for b in range(0x20, 0x80) if b not in b'"\\') + b"\n"
_OVERHEAD = 64  # the JSON around the lines: {"stream":"stdout","seq":N,"lines":[""]}


def is_plain(block: bytes) -> bool:
    """Whether ``block`` is lines of printable ASCII with nothing to escape in JSON."""
    return block.isascii() and not block.translate(None, _PLAIN)


def encode_plain(
    stream: str,
    seq: int,
    block: bytes,
    max_lines: int = MAX_CHUNK_LINES,
    max_bytes: int = MAX_CHUNK_BYTES,
) -> list[tuple[bytes, int]]:
    """``encode_chunks`` for a block of plain lines (``is_plain``, none longer than the
    line limit), built from the bytes as they are: no string per line, so the usual output
    of a chatty command costs a few passes over its bytes. The same messages, but for where
    a chunk ends."""
    out: list[tuple[bytes, int]] = []
    head = b'{"stream":"%s","seq":' % stream.encode()
    window = max_bytes - 2 * max_lines - _OVERHEAD  # bytes of lines that fit in a message
    aim = max_lines - max_lines // 50 or 1  # lines to aim a cut at (a little under the cap)
    start, end_all = 0, len(block)
    left = block.count(b"\n") + 1  # lines from ``start`` on
    while True:
        if left <= max_lines and end_all - start <= window:
            end, count = end_all, left
        else:  # cut where ``aim`` lines of the average length end, then count
            reach = min(window, (end_all - start) * aim // left)
            end = block.rfind(b"\n", start, start + reach + 1)
            if end < start:  # no newline that near: the next line alone
                end = block.find(b"\n", start)
                end = end_all if end < 0 else end
            count = block.count(b"\n", start, end) + 1
            while count > max_lines:  # lines shorter than the average: cut again
                guess = start + (end - start) * max_lines // count
                cut = block.rfind(b"\n", start, guess + 1)
                end = cut if cut > start else block.find(b"\n", start)
                count = block.count(b"\n", start, end) + 1
        left -= count
        piece = block[start:end]
        if count == 1:
            payload = encode(LogLine(stream=stream, seq=seq, text=piece.decode("ascii")))
        else:
            lines = piece.replace(b"\n", b'","')
            payload = b"".join((head, b"%d" % seq, b',"lines":["', lines, b'"]}'))
        out.append((payload, count))
        seq += count
        if end >= end_all:
            return out
        start = end + 1


class LogPublisher:
    def __init__(
        self, js: JetStreamContext, run_id: str, step_id: str, attempt: int, max_line_bytes: int
    ) -> None:
        self._js = js
        self._nc = js._nc  # core publishes: ordered, pipelined, stored by the stream
        self.subject = names.log(run_id, step_id, attempt)
        self.max_line_bytes = max_line_bytes
        self.seq = 0  # lines numbered so far (the command's and the runner's notes)
        self.messages = 0  # messages published so far
        self.output_lines = 0  # lines of the command's own (not notes)
        self._partial: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._since_messages = 0  # since the last checkpoint
        self._since_bytes = 0
        self._checkpoint: asyncio.Future | None = None
        self._held: str | None = None  # the first note, not sent yet (``hold``)

    async def write(self, stream: str, data: bytes) -> None:
        """Raw bytes as read from a pipe: its complete lines go out now, as one message (or
        a few, past the caps); a partial line waits for the rest."""
        if self._held is not None:
            await self.release()
        buf = self._partial[stream]
        buf += data
        end = buf.rfind(b"\n")
        lines: list[str] = []
        if end >= 0:
            block = bytes(buf[:end])
            del buf[: end + 1]
            limit = self.max_line_bytes
            if len(buf) <= limit and is_plain(block) and not has_long_line(block, limit):
                await self._messages(encode_plain(stream, self.seq + 1, block))
                return
            lines = split_lines(block, limit)
        # A line longer than the limit goes out in pieces as soon as a piece is complete
        # (only once more bytes follow it, so a line of exactly the limit stays one line).
        limit = self.max_line_bytes
        while len(buf) > limit:
            cut = cut_point(buf, limit)
            lines.append(_decode(buf[:cut]))
            del buf[:cut]
        if lines:
            await self._lines(stream, lines)

    def hold(self, text: str) -> None:
        """The log's first note, kept back: it goes out before the command's first output,
        on ``release``, or in one message with the final note if neither came first (a short
        silent step's whole log is then one message instead of two)."""
        self._held = text

    async def release(self) -> None:
        """Send the held note now, if it is still held."""
        if self._held is not None:
            text, self._held = self._held, None
            await self._note(text)

    async def note(self, text: str) -> None:
        """A transition, written into the same log as the output. Output still waiting for
        its newline goes first, so the final note follows the command's last line."""
        await self.release()
        await self._flush_partial()
        await self._note(text)

    async def close(self, text: str) -> None:
        """Send what is left and the final note. If the command wrote anything, wait
        (briefly) until the stream has stored every line: its output is stored before its
        outcome is reported. A command that wrote nothing has only the runner's own notes
        at stake, and the final one leaves with the outcome, in the same write."""
        await self._flush_partial()
        if self.output_lines:
            await self._note(text, confirm=True)
            await self._confirm()
        elif self._held is not None:
            held, self._held = self._held, None
            self.seq += 2
            lines = [held, text]
            await self._publish(encode(LogLine(stream="heddle", seq=self.seq - 1, lines=lines)))
        else:
            await self._note(text)

    async def _flush_partial(self) -> None:
        for stream, buf in self._partial.items():
            if buf:
                lines = split_long(buf, self.max_line_bytes)
                buf.clear()
                await self._lines(stream, lines)

    async def _lines(self, stream: str, lines: list[str]) -> None:
        await self._messages(encode_chunks(stream, self.seq + 1, lines))

    async def _messages(self, messages: list[tuple[bytes, int]]) -> None:
        for payload, count in messages:
            self.seq += count
            self.output_lines += count
            await self._publish(payload)

    async def _note(self, text: str, confirm: bool = False) -> None:
        self.seq += 1
        await self._publish(encode(LogLine(stream="heddle", seq=self.seq, text=text)), confirm)

    async def _publish(self, payload: bytes, confirm: bool = False) -> None:
        self.messages += 1
        headers = {MSG_HEADER: str(self.messages)}
        self._since_messages += 1
        self._since_bytes += len(payload)
        if (
            confirm
            or self._since_messages >= CHECKPOINT_MESSAGES
            or self._since_bytes >= CHECKPOINT_BYTES
        ):
            self._since_messages = self._since_bytes = 0
            try:
                future = await self._js.publish_async(self.subject, payload, headers=headers)
            except Exception as exc:  # never fatal to the step: send it unconfirmed
                log.warning("log checkpoint on %s not sent: %s", self.subject, exc)
                await self._nc.publish(self.subject, payload, headers=headers)
                return
            await self._confirm()  # the previous checkpoint
            self._checkpoint = future
        else:
            await self._nc.publish(self.subject, payload, headers=headers)

    async def _confirm(self) -> None:
        future, self._checkpoint = self._checkpoint, None
        if future is None:
            return
        if not self._nc.is_connected:
            future.cancel()  # an outage must not hold the command's output up
            return
        try:
            await asyncio.wait_for(future, CHECKPOINT_WAIT)
        except Exception as exc:
            log.warning("log lines on %s not confirmed: %r", self.subject, exc)
