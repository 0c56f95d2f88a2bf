"""A stream's snapshot taken through the server, and a stream made again from one: the
JetStream API's chunked protocols, which nats-py has no call for (the ``nats`` CLI's
``stream backup`` and ``stream restore`` speak the same; nats-server's
server/jetstream_api.go, jsStreamSnapshotRequest and jsStreamRestoreRequest).

Snapshot: ``$JS.API.STREAM.SNAPSHOT.<stream>`` with ``{"deliver_subject": ...}`` answers
the stream's configuration and state, then the server sends the snapshot (an s2-compressed
tar, consumers included) to the deliver subject in chunks, each with a reply subject
(``$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<index>``) to acknowledge it on: the server keeps a
window of chunks unacknowledged, and gives up after some seconds without one. An empty
message ends it; its status header says 204 (or nothing, for an empty stream) when whole,
else why it stopped.

Restore: ``$JS.API.STREAM.RESTORE.<stream>`` with ``{"config": ..., "state": ...}`` answers
a deliver subject; each chunk is sent there as a request (an empty answer takes it, JSON
refuses it), and an empty request ends it, answered once the stream is made (a stream
create response)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import nats.errors
from heddle.shared.wire.errors import HeddleError

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription

CHUNK = 128 * 1024  # the server's own default
# The server waits 5 s for an acknowledgement; this side waits longer for a chunk, since a
# large stream's first chunk comes once its snapshot is prepared.
IDLE_LIMIT = 30.0
# Making the stream from the staged chunks may take long for a large one.
RESTORE_LIMIT = 600.0


class SnapshotFailed(HeddleError):
    def __init__(self, stream: str, why: str) -> None:
        super().__init__(f"stream {stream}: {why}")
        self.stream = stream


def snapshot_subject(stream: str) -> str:
    return f"$JS.API.STREAM.SNAPSHOT.{stream}"


def restore_subject(stream: str) -> str:
    return f"$JS.API.STREAM.RESTORE.{stream}"


async def _request(nc: Client, stream: str, subject: str, data: bytes, timeout: float) -> Msg:
    """A request of the protocol; no answer (a server gone, a permission missing: the
    server drops what a user may not send) is SnapshotFailed."""
    try:
        return await nc.request(subject, data, timeout=timeout)
    except nats.errors.TimeoutError:
        raise SnapshotFailed(stream, f"no answer on {subject} in {timeout:g} s") from None
    except nats.errors.Error as exc:
        raise SnapshotFailed(stream, f"{subject}: {exc}") from None


def _answer(stream: str, data: bytes) -> dict[str, Any]:
    """A JSON answer of the API, or SnapshotFailed with the server's reason."""
    try:
        answer = json.loads(data or b"{}")
    except ValueError:
        raise SnapshotFailed(stream, f"the server answered {data[:200]!r}") from None
    if not isinstance(answer, dict):
        raise SnapshotFailed(stream, f"the server answered {data[:200]!r}")
    if error := answer.get("error"):
        why = error.get("description", error) if isinstance(error, dict) else error
        raise SnapshotFailed(stream, f"the server refused: {why}")
    return answer


async def take_snapshot(
    nc: Client, stream: str, inbox: str, write: Callable[[bytes], object], timeout: float
) -> dict[str, Any]:
    """Take ``stream``'s snapshot, its consumers included, handing each chunk to ``write``
    in order; returns ``{"config": ..., "state": ...}`` as the server gave them (the body
    of the request that restores it). ``inbox``: a subject of the caller's own inbox."""
    try:
        sub = await nc.subscribe(inbox)  # before the request: the chunks follow its answer
        try:
            request = json.dumps({"deliver_subject": inbox, "chunk_size": CHUNK}).encode()
            reply = await _request(nc, stream, snapshot_subject(stream), request, timeout)
            answer = _answer(stream, reply.data)
            await _receive(nc, stream, sub, write)
        finally:
            await sub.unsubscribe()
    except nats.errors.Error as exc:  # the connection lost
        raise SnapshotFailed(stream, str(exc) or repr(exc)) from None
    return {"config": answer.get("config"), "state": answer.get("state")}


async def _receive(
    nc: Client, stream: str, sub: Subscription, write: Callable[[bytes], object]
) -> None:
    """The snapshot's chunks, each acknowledged once written, up to its end."""
    while True:
        try:
            msg = await sub.next_msg(timeout=IDLE_LIMIT)
        except nats.errors.TimeoutError:
            raise SnapshotFailed(stream, f"no chunk for {IDLE_LIMIT:g} s") from None
        if not msg.data:  # the end: whole, or why not
            headers = msg.headers or {}
            status = headers.get("Status", "")
            if status and status != "204":
                why = headers.get("Description", "")
                raise SnapshotFailed(stream, f"the snapshot stopped: {status} {why}")
            return
        write(msg.data)
        if msg.reply:
            await nc.publish(msg.reply, b"")


async def restore_snapshot(
    nc: Client, stream: str, meta: bytes, chunks: Iterator[bytes], timeout: float
) -> dict[str, Any]:
    """Make ``stream`` from its snapshot: ``meta`` the ``{"config", "state"}`` its snapshot
    answered, ``chunks`` the snapshot. Returns the new stream's state."""
    reply = await _request(nc, stream, restore_subject(stream), meta, timeout)
    deliver = _answer(stream, reply.data).get("deliver_subject")
    if not isinstance(deliver, str) or not deliver:
        raise SnapshotFailed(stream, "the server named no subject to send the snapshot to")
    for chunk in chunks:
        taken = await _request(nc, stream, deliver, chunk, timeout)
        if taken.data:
            _answer(stream, taken.data)
            raise SnapshotFailed(stream, f"a chunk was refused: {taken.data[:200]!r}")
    done = await _request(nc, stream, deliver, b"", RESTORE_LIMIT)
    made = _answer(stream, done.data)
    state = made.get("state")
    if not isinstance(state, dict):
        raise SnapshotFailed(stream, f"the server answered {done.data[:200]!r}")
    return state
