"""The semaphores in heddle-semaphores: one key a semaphore, each change made by
compare-and-set (kv_documents.py; docs/pools.md, "Semaphores"). What a change is,
shared/core/semaphores.py decides."""

from __future__ import annotations

from heddle.shared.broker.kv_documents import KvDocuments
from heddle.shared.core.semaphores import DEFAULT_SIZE
from heddle.shared.wire.contracts import Semaphore, semaphore_decoder


def unknown() -> Semaphore:
    """A semaphore never set nor taken: its size is the default."""
    return Semaphore(size=DEFAULT_SIZE)


SEMAPHORES = KvDocuments("semaphore", semaphore_decoder, unknown)
decoded = SEMAPHORES.decoded
read = SEMAPHORES.read
read_all = SEMAPHORES.read_all
change = SEMAPHORES.change
