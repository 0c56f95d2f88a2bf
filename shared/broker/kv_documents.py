"""Documents of one kind in a KV bucket, one key each, each change made by compare-and-set
on the revision read, and made again on a conflict: the semaphores (semaphore_store.py) and
the concurrency keys (concurrency_store.py). What a change is, the pure core decides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec
from heddle.shared.broker.buckets import Bucket
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.wire.contracts import encode
from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError

T = TypeVar("T")
MAX_CONFLICTS = 1000  # writers racing on one key; each try reads the latest first


class KvDocuments(Generic[T]):
    """``decoder``'s documents; ``empty()`` is the one of a key never written (or not one
    of ours, replaced by the next change)."""

    def __init__(self, what: str, decoder: msgspec.json.Decoder[T], empty: Callable[[], T]):
        self.what = what  # for the error of a key that never stops changing
        self.decoder = decoder
        self.empty = empty

    def decoded(self, value: bytes | None) -> T:
        try:
            return self.decoder.decode(value) if value else self.empty()
        except msgspec.DecodeError:
            return self.empty()

    async def read(self, kv: Bucket, name: str) -> tuple[T, int]:
        """The document and its revision (0: no key, or a deleted one)."""
        try:
            entry = await kv.get(name)
        except (KeyNotFoundError, KeyDeletedError):
            return self.empty(), 0
        return self.decoded(entry.value), entry.revision or 0

    async def read_all(self, kv: Bucket) -> dict[str, T]:
        """Every document stored, by key."""
        return {e.key: self.decoded(e.value) for e in await read_current(kv, ">")}

    async def change(self, kv: Bucket, name: str, fn: Callable[[T], T]) -> T:
        """``fn`` applied to the document as stored, written if it changed anything, until a
        write lands on the revision it read. ``fn`` may be called several times: each call
        must depend on its argument alone."""
        for _ in range(MAX_CONFLICTS):
            doc, revision = await self.read(kv, name)
            new = fn(doc)
            if new == doc and (revision or new == self.empty()):
                return doc
            try:
                if revision:
                    await kv.update(name, encode(new), last=revision)
                else:
                    await kv.create(name, encode(new))
                return new
            except KeyWrongLastSequenceError:
                continue  # written meanwhile by another: read again
        raise RuntimeError(f"{self.what} {name}: {MAX_CONFLICTS} conflicting writes in a row")
