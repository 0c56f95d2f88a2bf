"""Every API token record in memory, kept by a watch of the heddle-tokens bucket, so a token
is checked without a NATS round trip and a token revoked through any gateway stops working
on every other as soon as its watch delivers the change (milliseconds).

The bootstrap: ``HEDDLE_ADMIN_TOKEN_FILE`` holds a token that is stored, hashed, as the token
named ``admin`` if no token of that name exists yet. It is created, never overwritten: a
revoked ``admin`` stays revoked however often the gateway restarts with the same file.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from heddle.shared.broker.kv_watch import follow
from heddle.shared.broker.nats_types import (
    KeyWrongLastSequenceError,
    NatsTimeout,
    NoStreamResponseError,
)
from heddle.shared.core.tokens import (
    ADMIN_NAME,
    TokenRecord,
    token_hash,
    token_record_decoder,
    token_text_problem,
)
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire.errors import TokenFileError
from heddle.shared.wire.timefmt import now_rfc3339

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import KeyValue

log = logging.getLogger("heddle.gateway")
START_WAIT = 10.0  # seconds the gateway waits for the first replay of the bucket


class TokenIndex:
    """Token records by name and by hash. ``put`` keeps the newest revision of each name,
    so a record applied at once by the gateway that wrote it is not undone by the watch
    delivering an older one."""

    def __init__(self) -> None:
        self._by_name: dict[str, tuple[int, TokenRecord]] = {}
        self._by_hash: dict[str, TokenRecord] = {}
        self._kv: KeyValue | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- the map (no I/O) ----

    def put(self, revision: int, record: TokenRecord) -> None:
        held = self._by_name.get(record.name)
        if held is not None:
            if held[0] >= revision:
                return
            self._by_hash.pop(held[1].hash, None)
        self._by_name[record.name] = (revision, record)
        self._by_hash[record.hash] = record

    def remove(self, name: str, revision: int) -> None:
        held = self._by_name.get(name)
        if held is not None and held[0] < revision:
            del self._by_name[name]
            self._by_hash.pop(held[1].hash, None)

    def lookup(self, token: str) -> TokenRecord | None:
        """The record of a token (revoked ones included), or None."""
        return self._by_hash.get(token_hash(token))

    def records(self) -> list[TokenRecord]:
        return [self._by_name[name][1] for name in sorted(self._by_name)]

    def __len__(self) -> int:
        return len(self._by_name)

    # ---- the watch ----

    async def start(self, kv: KeyValue) -> None:
        """Follow the bucket; returns once its current records are in."""
        self._kv = kv
        caught_up = asyncio.Event()
        self._task = asyncio.create_task(self._follow(caught_up), name="token-watch")
        await asyncio.wait_for(caught_up.wait(), START_WAIT)

    async def rewatch(self) -> None:
        """After a reconnect: the watch's consumer may be gone, so start it again."""
        if self._task is not None and self._kv is not None:
            await cancel_and_wait(self._task)
            self._task = asyncio.create_task(self._follow(asyncio.Event()), name="token-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _follow(self, caught_up: asyncio.Event) -> None:
        assert self._kv is not None
        await follow(self._kv, self._on_entry, what="token", log=log, on_caught_up=caught_up.set)

    async def _on_entry(self, entry: KeyValue.Entry) -> None:
        if entry.operation in ("DEL", "PURGE") or not entry.value:
            self.remove(entry.key, entry.revision or 0)
            return
        try:
            record = token_record_decoder.decode(entry.value)
        except msgspec.DecodeError as exc:
            log.warning("token record %r is unreadable (%s); it is ignored", entry.key, exc)
            return
        self.put(entry.revision or 0, record)


def read_token_file(path: str) -> str:
    """The token in ``path`` (surrounding whitespace removed), or TokenFileError."""
    try:
        token = Path(path).read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(path, f"cannot be read ({exc.__class__.__name__})") from exc
    problem = token_text_problem(token)
    if problem is not None:
        raise TokenFileError(path, problem)
    return token


async def _create(kv: KeyValue, key: str, value: bytes, patience: float = 30.0) -> int:
    """``kv.create``, asked again while the bucket's stream answers nothing: on a cluster a
    bucket just made has no leader for a moment. A create that was stored all the same
    comes back as KeyWrongLastSequenceError, which the caller handles."""
    delay, deadline = 0.1, time.monotonic() + patience
    while True:
        try:
            return await kv.create(key, value)
        except (NoStreamResponseError, NatsTimeout):
            if time.monotonic() > deadline:
                raise
            log.info("no answer from the tokens bucket yet (a leader being elected); again")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


async def seed_admin(kv: KeyValue, index: TokenIndex, token: str, path: str) -> None:
    """Store ``token`` (read from ``path``) as the admin token unless one of that name
    exists."""
    digest = token_hash(token)
    record = TokenRecord(name=ADMIN_NAME, role="admin", hash=digest, created_at=now_rfc3339())
    try:
        revision = await _create(kv, ADMIN_NAME, msgspec.json.encode(record))
    except KeyWrongLastSequenceError:
        entry = await kv.get(ADMIN_NAME)
        held = token_record_decoder.decode(entry.value or b"")
        if held.hash != digest:
            log.warning(
                "a token named %s exists already and is not the one in %s: that file's token "
                "is not accepted (revoke or use the existing one)",
                ADMIN_NAME,
                path,
            )
        elif held.revoked:
            log.warning("the admin token in %s was revoked; it stays revoked", path)
        return
    index.put(revision, record)
    log.info("stored the admin token from %s as the token named %s", path, ADMIN_NAME)
