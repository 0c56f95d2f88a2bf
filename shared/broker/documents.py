"""Documents too large to travel in their command, carried beside it in HEDDLE_DOCS.

A submit of a big run (100,000 steps are several MB) would not fit in one NATS message (1 MiB
by default), and large messages in HEDDLE_CMD would hold back the commands behind them. So
the gateway stores such a document as chunks on a subject of its own, each chunk at most a
message, and the command names them (``DocumentRef``: the subject, the chunks' stream
sequences in order, the size and the SHA-256). The orchestrator reads the chunks with
direct gets, checks size and digest, and purges the subject once the run is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
from typing import TYPE_CHECKING

from heddle.shared.wire import names
from heddle.shared.wire.contracts import DocumentRef
from nats.js.errors import NotFoundError

if TYPE_CHECKING:
    from nats.js import JetStreamContext

log = logging.getLogger("heddle.nats")

# Commands above this size go out of band even when the server would take them: a command
# stream of megabyte messages holds back every command behind them, and the orchestrator's
# pull credit (512 commands) would buffer that many.
INLINE_MAX = 256 * 1024


class DocumentGone(Exception):
    """The document is not stored as its reference says: purged, expired or altered."""


def carried(size: int, payload_limit: int) -> bool:
    """Whether a command of ``size`` bytes travels out of band."""
    return size > min(INLINE_MAX, payload_limit)


async def put_document(js: JetStreamContext, run_id: str, data: bytes, chunk: int) -> DocumentRef:
    """Store ``data`` in chunks of at most ``chunk`` bytes, acknowledged together."""
    subject = names.document(run_id, secrets.token_hex(6))
    parts = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    acks = await asyncio.gather(*(js.publish(subject, part) for part in parts))
    return DocumentRef(
        subject=subject,
        seqs=[ack.seq for ack in acks],
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


async def read_document(js: JetStreamContext, ref: DocumentRef) -> bytes:
    """The document's bytes; DocumentGone if a chunk is missing or the whole does not match."""
    try:
        msgs = await asyncio.gather(
            *(js.get_msg(names.DOCS_STREAM, seq=seq, direct=True) for seq in ref.seqs)
        )
    except NotFoundError as exc:
        raise DocumentGone(f"document {ref.subject}: a chunk is gone") from exc
    if any(m.subject != ref.subject for m in msgs):
        raise DocumentGone(f"document {ref.subject}: a chunk is not on its subject")
    data = b"".join(m.data or b"" for m in msgs)
    if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.sha256:
        raise DocumentGone(f"document {ref.subject}: size or digest differs")
    return data


async def drop_document(js: JetStreamContext, ref: DocumentRef) -> None:
    """Purge the document's chunks; never fatal (the stream's age limit removes them too)."""
    with contextlib.suppress(Exception):
        await js.purge_stream(names.DOCS_STREAM, subject=ref.subject)
