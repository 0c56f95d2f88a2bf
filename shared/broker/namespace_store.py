"""The namespaces in heddle-namespaces: one record a namespace, by name, each change made by
compare-and-set (kv_documents.py; docs/namespaces.md, "Quotas"). What a change is,
shared/core/quotas.py decides."""

from __future__ import annotations

from heddle.shared.broker.kv_documents import KvDocuments
from heddle.shared.wire.contracts import NamespaceRecord, namespace_record_decoder


def unknown() -> NamespaceRecord:
    """No record: a namespace never made (or ``default``, which exists without one)."""
    return NamespaceRecord(name="")


NAMESPACES = KvDocuments("namespace", namespace_record_decoder, unknown)
