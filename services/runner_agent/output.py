"""A step's output, line by line, into HEDDLE_LOGS as the command writes it.

Lines are published as core messages on the attempt's log subject: the stream stores them
in order without a round trip each, so a command that prints fast is not slowed by
acknowledgements. Whatever was written to the socket before a crash is stored.
"""

from __future__ import annotations

import contextlib

from nats.js import JetStreamContext

from shared import names
from shared.contracts import LogLine, encode


class LogPublisher:
    def __init__(
        self, js: JetStreamContext, run_id: str, step_id: str, attempt: int, max_line_bytes: int
    ) -> None:
        self._nc = js._nc  # core publishes: ordered, pipelined, stored by the stream
        self.subject = names.log(run_id, step_id, attempt)
        self.max_line_bytes = max_line_bytes
        self.seq = 0
        self._partial: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}

    async def write(self, stream: str, data: bytes) -> None:
        """Raw bytes as read from a pipe: complete lines go out now, a partial line waits."""
        buf = self._partial[stream]
        buf += data
        start = 0
        limit = self.max_line_bytes
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            await self._line(stream, buf[start:end])
            start = end + 1
        del buf[:start]
        # A line longer than the limit is split into pieces of the limit.
        while len(buf) >= limit:
            await self._line(stream, buf[:limit])
            del buf[:limit]

    async def note(self, text: str) -> None:
        """A transition, written into the same log as the output."""
        await self._send("heddle", text)

    async def close(self) -> None:
        for stream, buf in self._partial.items():
            if buf:
                await self._line(stream, buf)
                buf.clear()
        with contextlib.suppress(Exception):
            await self._nc.flush(timeout=5)

    async def _line(self, stream: str, raw: bytes | bytearray) -> None:
        for i in range(0, max(len(raw), 1), self.max_line_bytes):
            piece = bytes(raw[i : i + self.max_line_bytes])
            await self._send(stream, piece.decode("utf-8", errors="replace"))

    async def _send(self, stream: str, text: str) -> None:
        self.seq += 1
        payload = encode(LogLine(stream=stream, seq=self.seq, text=text))
        await self._nc.publish(self.subject, payload)
