"""A step's output, line by line, into HEDDLE_LOGS as the command writes it.

Lines are published as core messages on the attempt's log subject: the stream stores them
in order without a round trip each, so a command that prints fast is not slowed by
acknowledgements. Whatever was written to the socket before a crash is stored.

Core messages are not flow-controlled, and a stream drops what arrives while its ingest
queue is full (nats-server's ``max_buffered_msgs``, 10,000 by default): an unchecked
``seq 1 200000`` lost 40% of its lines. So every ``CHECKPOINT_LINES``-th message (and the
final note, if the command wrote anything) is published with an acknowledgement, and the
next checkpoint waits for the previous one's: a stream stores one connection's messages in
order, so an acknowledged checkpoint means every line before it is stored, and at most
``2 x CHECKPOINT_LINES`` lines of one attempt are ever in flight. The wait costs one round
trip per 256 lines, overlapped with the next 256.

A line longer than ``HEDDLE_LOG_LINE_MAX_BYTES`` is split into pieces of at most that many
bytes, cut at a UTF-8 character boundary where there is one; each piece is a line of its own
(with its own ``seq``). Invalid UTF-8 is replaced with U+FFFD, never fatal.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js import JetStreamContext

from shared import names
from shared.contracts import LogLine, encode

log = logging.getLogger("heddle.runner")

CHECKPOINT_LINES = 256
CHECKPOINT_WAIT = 2.0  # seconds; past this the lines are not waited for (never fatal)


def cut_point(data: bytes | bytearray, limit: int) -> int:
    """Where to cut ``data`` (longer than ``limit``) into a first piece of at most ``limit``
    bytes without splitting a UTF-8 character; ``limit`` itself if there is no such place."""
    i = limit
    while limit - i < 3 and i > 0 and (data[i] & 0xC0) == 0x80:  # continuation byte
        i -= 1
    if i == 0 or (data[i] & 0xC0) == 0x80:
        return limit
    return i


class LogPublisher:
    def __init__(
        self, js: JetStreamContext, run_id: str, step_id: str, attempt: int, max_line_bytes: int
    ) -> None:
        self._js = js
        self._nc = js._nc  # core publishes: ordered, pipelined, stored by the stream
        self.subject = names.log(run_id, step_id, attempt)
        self.max_line_bytes = max_line_bytes
        self.seq = 0
        self.output_lines = 0  # lines of the command's own (not notes)
        self._partial: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._since_checkpoint = 0
        self._checkpoint: asyncio.Future | None = None

    async def write(self, stream: str, data: bytes) -> None:
        """Raw bytes as read from a pipe: complete lines go out now, a partial line waits."""
        buf = self._partial[stream]
        buf += data
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            await self._line(stream, buf[start:end])
            start = end + 1
        del buf[:start]
        # A line longer than the limit goes out in pieces as soon as a piece is complete
        # (only once more bytes follow it, so a line of exactly the limit stays one line).
        limit = self.max_line_bytes
        while len(buf) > limit:
            cut = cut_point(buf, limit)
            await self._send(stream, bytes(buf[:cut]).decode("utf-8", errors="replace"))
            del buf[:cut]

    async def note(self, text: str) -> None:
        """A transition, written into the same log as the output. Output still waiting for
        its newline goes first, so the final note follows the command's last line."""
        await self._flush_partial()
        await self._send("heddle", text)

    async def close(self, text: str) -> None:
        """Send what is left and the final note. If the command wrote anything, wait
        (briefly) until the stream has stored every line: its output is stored before its
        outcome is reported. A command that wrote nothing has only the runner's own notes
        at stake, and the final one leaves with the outcome, in the same write."""
        await self._flush_partial()
        if self.output_lines:
            await self._send("heddle", text, confirm=True)
            await self._confirm()
        else:
            await self._send("heddle", text)

    async def _flush_partial(self) -> None:
        for stream, buf in self._partial.items():
            if buf:
                await self._line(stream, buf)
                buf.clear()

    async def _line(self, stream: str, raw: bytes | bytearray) -> None:
        limit = self.max_line_bytes
        while len(raw) > limit:
            cut = cut_point(raw, limit)
            await self._send(stream, bytes(raw[:cut]).decode("utf-8", errors="replace"))
            raw = raw[cut:]
        await self._send(stream, bytes(raw).decode("utf-8", errors="replace"))

    async def _send(self, stream: str, text: str, confirm: bool = False) -> None:
        self.seq += 1
        if stream != "heddle":
            self.output_lines += 1
        payload = encode(LogLine(stream=stream, seq=self.seq, text=text))
        self._since_checkpoint += 1
        if confirm or self._since_checkpoint >= CHECKPOINT_LINES:
            self._since_checkpoint = 0
            try:
                future = await self._js.publish_async(self.subject, payload)
            except Exception as exc:  # never fatal to the step: send it unconfirmed
                log.warning("log checkpoint on %s not sent: %s", self.subject, exc)
                await self._nc.publish(self.subject, payload)
                return
            await self._confirm()  # the previous checkpoint
            self._checkpoint = future
        else:
            await self._nc.publish(self.subject, payload)

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
