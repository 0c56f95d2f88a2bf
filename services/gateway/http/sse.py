"""Server-sent events as the gateway writes them: the answer's headers and one event."""

from __future__ import annotations

from typing import Any

import msgspec

HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # a proxy passes each event on at once
}
_encode = msgspec.json.Encoder().encode


def event(kind: str, data: Any) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), _encode(data))
