"""JetStream publishes whose acknowledgements are matched by a counter.

The protocol is nats-py's ``publish_async``: each message carries its own reply subject
under one wildcard inbox subscription, and the server's acknowledgement arrives there. What
differs is the cost per message: nats-py draws a random token for every message (a
``getrandom`` system call) and builds a ``PubAck`` dataclass from ``json.loads`` for every
acknowledgement; here a token is a counter and an acknowledgement is only decoded when it
carries an error. That roughly halves the client's CPU per acknowledged publish, on the
paths that write several records per step (the orchestrator's effects, the runner's
heartbeat and outcome; docs/performance.md).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from heddle.shared.wire.errors import AcknowledgementLost
from nats.errors import Error as NatsError
from nats.js.errors import APIError, KeyWrongLastSequenceError, NoStreamResponseError

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

# JetStream's error code for a failed Nats-Expected-Last-Subject-Sequence (and -Sequence).
WRONG_LAST_SEQUENCE = 10071
# What a publish here raises, or its awaited future fails with, when the message is not known
# to be stored: nats-py's errors (the server's, a closed connection), an acknowledgement lost
# with its connection, and the caller's own wait for it running out.
NOT_STORED: tuple[type[Exception], ...] = (NatsError, AcknowledgementLost, TimeoutError)


class AckedPublisher:
    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._prefix = ""
        self._count = 0
        self._pending: dict[str, tuple[str, asyncio.Future[bytes]]] = {}

    async def start(self) -> AckedPublisher:
        self._prefix = self._nc.new_inbox() + "."
        await self._nc.subscribe(self._prefix + "*", cb=self._on_ack)
        return self

    async def publish(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> asyncio.Future[bytes]:
        """Send now; the future resolves to the acknowledgement's body once the stream
        stored the message, or fails with the server's error. A caller that stops waiting
        (cancels it) leaves nothing behind."""
        self._count += 1
        token = str(self._count)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[token] = (subject, future)
        future.add_done_callback(lambda _: self._pending.pop(token, None))
        try:
            await self._nc.publish(subject, payload, reply=self._prefix + token, headers=headers)
        except BaseException:
            future.cancel()
            raise
        return future

    @property
    def in_flight(self) -> int:
        """Writes published and not yet acknowledged, failed or given up by their caller."""
        return len(self._pending)

    def lost(self) -> None:
        """The connection dropped: call from its disconnect handler. No acknowledgement
        still awaited can come any more, so those publishes fail now and their writers send
        them again at once, instead of waiting out their own timeouts (a broker killed
        under the orchestrator held a run's writes for 10 s)."""
        pending, self._pending = self._pending, {}
        for subject, future in pending.values():
            if not future.done():
                future.set_exception(AcknowledgementLost(subject))

    async def _on_ack(self, msg: Msg) -> None:
        entry = self._pending.get(msg.subject[len(self._prefix) :])
        if entry is None or entry[1].done():
            return
        future = entry[1]
        if msg.headers and msg.headers.get("Status") == "503":
            future.set_exception(NoStreamResponseError())  # no stream takes this subject
            return
        data = msg.data
        if b'"error"' in data:
            try:
                found = json.loads(data).get("error") or {}
            except ValueError:
                found = {"description": data.decode(errors="replace")}
            error = {k: found[k] for k in ("code", "err_code", "description") if k in found}
            error.setdefault("code", 500)
            if error.get("err_code") == WRONG_LAST_SEQUENCE:  # as kv.update raises it
                future.set_exception(KeyWrongLastSequenceError(error.get("description")))
                return
            try:
                APIError.from_error(error)  # raises the server's error as nats-py types it
            except APIError as exc:
                future.set_exception(exc)
            return
        future.set_result(data)
