"""The concurrency keys in heddle-concurrency: one document a key, under the sha256 of its
text, each change made by compare-and-set (kv_documents.py; docs/pools.md, "Concurrency
limits"). What a change is, shared/core/concurrency.py decides."""

from __future__ import annotations

from heddle.shared.broker.kv_documents import KvDocuments
from heddle.shared.wire.contracts import ConcurrencyKey, concurrency_key_decoder

KEYS = KvDocuments("concurrency key", concurrency_key_decoder, ConcurrencyKey)
