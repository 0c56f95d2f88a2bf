"""The semaphores in heddle-semaphores: one key a semaphore, each change made by
compare-and-set on the revision read, and made again on a conflict (docs/pools.md,
"Semaphores"). What a change is, shared/core/semaphores.py decides."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from heddle.shared.broker.buckets import Bucket
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.core.semaphores import DEFAULT_SIZE
from heddle.shared.wire.contracts import Semaphore, encode, semaphore_decoder
from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError

MAX_CONFLICTS = 1000  # writers racing on one key; each try reads the latest first


def unknown() -> Semaphore:
    """A semaphore never set nor taken: its size is the default."""
    return Semaphore(size=DEFAULT_SIZE)


def decoded(value: bytes | None) -> Semaphore:
    try:
        return semaphore_decoder.decode(value) if value else unknown()
    except msgspec.DecodeError:
        return unknown()  # not one of ours: taken as unknown, replaced by the next change


async def read(kv: Bucket, name: str) -> tuple[Semaphore, int]:
    """The semaphore and its revision (0: no key, or a deleted one)."""
    try:
        entry = await kv.get(name)
    except (KeyNotFoundError, KeyDeletedError):
        return unknown(), 0
    return decoded(entry.value), entry.revision or 0


async def read_all(kv: Bucket) -> dict[str, Semaphore]:
    """Every semaphore stored, by name."""
    return {e.key: decoded(e.value) for e in await read_current(kv, ">")}


async def change(kv: Bucket, name: str, fn: Callable[[Semaphore], Semaphore]) -> Semaphore:
    """``fn`` applied to the semaphore as stored, written if it changed anything, until a
    write lands on the revision it read. ``fn`` may be called several times: each call
    must depend on its argument alone."""
    for _ in range(MAX_CONFLICTS):
        sem, revision = await read(kv, name)
        new = fn(sem)
        if new == sem and (revision or new == unknown()):
            return sem
        try:
            if revision:
                await kv.update(name, encode(new), last=revision)
            else:
                await kv.create(name, encode(new))
            return new
        except KeyWrongLastSequenceError:
            continue  # written meanwhile by another: read again
    raise RuntimeError(f"semaphore {name}: {MAX_CONFLICTS} conflicting writes in a row")
