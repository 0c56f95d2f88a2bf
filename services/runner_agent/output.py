"""A step's output into HEDDLE_LOGS as the command writes it, in chunks of lines.

The complete lines of one pipe read (of stdout or of stderr) go out as one message on the
attempt's log subject: the lines' bytes as the command wrote them, with the stream and the
first line's number in the ``Heddle-Stream`` and ``Heddle-Seq`` headers (``chunks.py``,
docs/logs.md). A message costs the runner and the server the same whatever it holds, so a
chunk per read, not a message per line: it keeps the lines as they were written and as live
(a read returns what the command has written so far) for about a hundredth of the messages.
Chunks are bytes, not JSON, because encoding lines as a JSON array would cost the runner
more than everything else it does for them. A partial line waits for its newline, or for the
command to end. The runner's own notes (started, succeeded, failed: reason) are JSON
``LogLine`` messages on the same subject.

Messages are core publishes: the stream stores them in order without a round trip each, so
a command that prints fast is not slowed by acknowledgements, and whatever was written to
the socket before a crash is stored. Core messages are not flow-controlled, though, and a
stream drops what arrives while its ingest queue is full (nats-server's
``max_buffered_msgs``, 10,000 messages), silently: a fast command would lose lines. So once
``CHECKPOINT_MESSAGES`` messages or
``CHECKPOINT_BYTES`` of payload went out since the last checkpoint, the next message (and
the final note, if the command wrote anything) is published with an acknowledgement, and
the next checkpoint waits for the previous one's: a stream stores one connection's messages
in order, so an acknowledged checkpoint means every message before it is stored, and at
most twice those amounts of one attempt are ever in flight.

A message sent ``CHECKPOINT_AGE`` or more after the last checkpoint is a checkpoint too: a
step that prints now and then has each of its prints acknowledged, so a refusal is heard.

When the store is full (docs/storage.md) a checkpoint is refused: from its first line on,
lines are dropped. Each message after that first tries a note, acknowledged and waited for:
while it is refused the message is dropped too; once it is stored, numbered as the last
line that went missing, it says how many did ("N lines dropped: the store was full"), and
the output goes on after it. The message after the note is acknowledged and waited for as
well: a store with room for the note alone refuses it, and its lines start the next loss.

Every runner message carries a ``Heddle-Msg`` header, its number among the runner's
messages of the attempt (1, 2, 3 ...). With the line numbers it lets a reader count an
attempt's lines exactly from two messages, the orchestrator's notes included
(services/gateway/reads/log_index.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from heddle.services.runner_agent.chunks import chunk, cut_long_lines, cut_point, split_long
from heddle.shared.broker.acked import NOT_STORED
from heddle.shared.broker.nats_types import APIError, NatsError
from heddle.shared.core.namespaces import namespace_of
from heddle.shared.core.store_space import dropped_note, is_store_full
from heddle.shared.wire import names
from heddle.shared.wire.contracts import LogLine, encode

if TYPE_CHECKING:
    from heddle.shared.broker.acked import AckedPublisher
    from heddle.shared.broker.nats_types import Client

log = logging.getLogger("heddle.runner")

CHECKPOINT_MESSAGES = 256
CHECKPOINT_BYTES = 1024 * 1024
CHECKPOINT_WAIT = 2.0  # seconds; past this the lines are not waited for (never fatal)
CHECKPOINT_AGE = 0.5  # seconds since the last checkpoint that make the next message one
MSG_HEADER = names.LOG_MSG_HEADER
STREAM_HEADER = names.LOG_STREAM_HEADER
SEQ_HEADER = names.LOG_SEQ_HEADER


class LogPublisher:
    def __init__(
        self,
        nc: Client,
        acked: AckedPublisher,
        run_id: str,
        step_id: str,
        attempt: int,
        max_line_bytes: int,
        runner: str,
    ) -> None:
        self._acked = acked  # the checkpoints
        self._nc = nc  # core publishes: ordered, pipelined, stored by the stream
        # Under its own name: the only log subjects the server lets this runner write.
        self.subject = names.log(run_id, step_id, attempt, namespace_of(run_id), runner)
        self.max_line_bytes = max_line_bytes
        self.seq = 0  # lines numbered so far (the command's and the runner's notes)
        self.messages = 0  # messages published so far
        self.output_lines = 0  # lines of the command's own (not notes)
        self._partial: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._since_messages = 0  # since the last checkpoint
        self._since_bytes = 0
        self._checkpoint_at = time.monotonic()
        self._published_seq = 0  # the last line number handed to _publish
        self._lost_from: int | None = None  # the first line the full store refused
        self._checkpoint: asyncio.Future | None = None
        self._held: str | None = None  # the first note, not sent yet (``hold``)
        self.dropped = 0  # messages the connection would not take (``_send``)

    async def write(self, stream: str, data: bytes) -> None:
        """Raw bytes as read from a pipe: its complete lines go out now, as one message (or
        a few, past the caps); a partial line waits for the rest."""
        if self._held is not None:
            await self.release()
        buf = self._partial[stream]
        buf += data
        limit = self.max_line_bytes
        end = buf.rfind(b"\n")
        parts: list[bytes] = []
        if end >= 0:
            parts.append(cut_long_lines(bytes(buf[:end]), limit))
            del buf[: end + 1]
        # A line longer than the limit goes out in pieces as soon as a piece is complete
        # (only once more bytes follow it, so a line of exactly the limit stays one line).
        while len(buf) > limit:
            cut = cut_point(buf, limit)
            parts.append(bytes(buf[:cut]))
            del buf[:cut]
        if parts:
            await self._chunks(stream, parts[0] if len(parts) == 1 else b"\n".join(parts))

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
            await self._note(held, text)
        else:
            await self._note(text)

    async def _flush_partial(self) -> None:
        for stream, buf in self._partial.items():
            if buf:
                block = b"\n".join(split_long(buf, self.max_line_bytes))
                buf.clear()
                await self._chunks(stream, block)

    async def _chunks(self, stream: str, block: bytes) -> None:
        """Complete lines (no line over the limit, no last newline) as chunk messages."""
        for body, count in chunk(block):
            headers = {STREAM_HEADER: stream, SEQ_HEADER: str(self.seq + 1)}
            self.seq += count
            self.output_lines += count
            await self._publish(body, headers=headers)

    async def _note(self, *texts: str, confirm: bool = False) -> None:
        """Notes as one message: a line keeps the shape of a line, several are ``lines``."""
        first = self.seq + 1
        self.seq += len(texts)
        if len(texts) == 1:
            note = LogLine(stream="heddle", seq=first, text=texts[0])
        else:
            note = LogLine(stream="heddle", seq=first, lines=list(texts))
        await self._publish(encode(note), confirm)

    async def _publish(
        self, payload: bytes, confirm: bool = False, headers: dict[str, str] | None = None
    ) -> None:
        first, self._published_seq = self._published_seq + 1, self.seq
        after_loss = self._lost_from is not None
        if after_loss and not await self._note_dropped(first):
            self.messages += 1  # dropped, and counted in the note to come
            return
        # The store took the note, and may have had room for it alone: the message after it
        # is acknowledged and waited for too, so that its refusal starts the next loss,
        # counted by a note, instead of going unheard.
        confirm = confirm or after_loss
        self.messages += 1
        if headers is None:
            headers = {MSG_HEADER: str(self.messages)}
        else:
            headers[MSG_HEADER] = str(self.messages)
        self._since_messages += 1
        self._since_bytes += len(payload)
        if (
            confirm
            or self._since_messages >= CHECKPOINT_MESSAGES
            or self._since_bytes >= CHECKPOINT_BYTES
            or time.monotonic() - self._checkpoint_at >= CHECKPOINT_AGE
        ):
            self._since_messages = self._since_bytes = 0
            self._checkpoint_at = time.monotonic()
            try:
                future = await self._acked.publish(self.subject, payload, headers=headers)
            except NatsError as exc:  # never fatal to the step: sent unconfirmed, if at all
                log.warning("log checkpoint on %s not sent: %s", self.subject, exc)
                await self._send(payload, headers)
                return
            future.add_done_callback(lambda done: self._refused_from(first, done))
            await self._confirm()  # the previous checkpoint
            self._checkpoint = future
            if after_loss:
                await self._confirm()
        else:
            await self._send(payload, headers)

    def _refused_from(self, first: int, checkpoint: asyncio.Future[bytes]) -> None:
        """A checkpoint the full store refused: its lines, and those after, are dropped."""
        if checkpoint.cancelled() or self._lost_from is not None:
            return
        exc = checkpoint.exception()
        if isinstance(exc, APIError) and is_store_full(exc.err_code, exc.description):
            log.warning("log lines on %s dropped: the store is full", self.subject)
            self._lost_from = first

    async def _note_dropped(self, first: int) -> bool:
        """The note that says how many lines went missing before line ``first``, stored
        in their place if the store takes it; whether it did."""
        lost_from = self._lost_from
        if lost_from is None or first <= lost_from:
            return lost_from is None
        note = LogLine(stream="heddle", seq=first - 1, text=dropped_note(first - lost_from))
        self.messages += 1
        headers = {MSG_HEADER: str(self.messages)}
        try:
            future = await self._acked.publish(self.subject, encode(note), headers=headers)
            await asyncio.wait_for(future, CHECKPOINT_WAIT)
        except NOT_STORED as exc:
            if isinstance(exc, APIError) and not is_store_full(exc.err_code, exc.description):
                log.warning("the dropped lines' note on %s not stored: %s", self.subject, exc)
            self.messages -= 1
            return False
        self._lost_from = None
        return True

    async def _send(self, payload: bytes, headers: dict[str, str]) -> None:
        """A core publish that never fails the step: during an outage whose outbound buffer
        is full, lines are dropped (and counted in the log) rather than the attempt's outcome."""
        try:
            await self._nc.publish(self.subject, payload, headers=headers)
        except NatsError as exc:
            self.dropped += 1
            if self.dropped == 1:
                log.warning("log messages on %s dropped: %s", self.subject, exc)

    async def _confirm(self) -> None:
        future, self._checkpoint = self._checkpoint, None
        if future is None:
            return
        if not self._nc.is_connected:
            future.cancel()  # an outage must not hold the command's output up
            return
        try:
            await asyncio.wait_for(future, CHECKPOINT_WAIT)
        except NOT_STORED as exc:  # the server's error, a lost connection, or no answer in time
            log.warning("log lines on %s not confirmed: %r", self.subject, exc)
