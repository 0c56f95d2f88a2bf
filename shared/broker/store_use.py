"""The store's use as the server counts it: the account's stored and reserved bytes
(``$JS.API.INFO``, whose ``reserved_storage`` nats-py's AccountInfo leaves out), each
stream's bytes, and the oldest logs purged for room (docs/storage.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from heddle.shared.core.store_space import StoreUse, limit_of
from nats.js.errors import APIError

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext

ACCOUNT_INFO = "$JS.API.INFO"


@dataclass(frozen=True, slots=True)
class StreamUse:
    name: str
    bytes: int
    messages: int
    max_bytes: int  # -1: no limit of its own


async def read_store_use(nc: Client, limit_setting: int, timeout: float) -> StoreUse:
    """The account's use, against the account's limit or else HEDDLE_STORE_MAX_BYTES."""
    msg = await nc.request(ACCOUNT_INFO, b"", timeout=timeout)
    info = json.loads(msg.data)
    if "error" in info:
        raise APIError.from_error(info["error"])
    account_limit = int(info.get("limits", {}).get("max_storage", -1))
    return StoreUse(
        used=int(info.get("storage", 0)),
        reserved=int(info.get("reserved_storage", 0)),
        limit=limit_of(account_limit, limit_setting),
    )


async def read_streams(js: JetStreamContext) -> list[StreamUse]:
    """Every stream's stored bytes and messages, and its own limit."""
    return [
        StreamUse(
            name=info.config.name or "",
            bytes=info.state.bytes,
            messages=info.state.messages,
            max_bytes=info.config.max_bytes if info.config.max_bytes is not None else -1,
        )
        for info in await js.streams_info()
    ]


async def purge_oldest(js: JetStreamContext, stream: str, keep: int) -> None:
    """The stream's oldest messages purged, its ``keep`` newest kept."""
    await js.purge_stream(stream, keep=keep)
