"""The JetStream store's room: which refusals mean it is full, whether a new run may take
room, and how much of the logs gives way to the runs under way (docs/storage.md). Pure.

nats-server counts the bytes each account stores (``$JS.API.INFO``'s ``storage``) against
the account's ``max_file`` and the server's ``max_file_store``; a stream's ``max_bytes`` is
only reserved, checked when the stream is made. So a full store refuses every write alike:
Heddle keeps room for the writes it cannot lose by refusing new runs first, and by purging
the oldest logs when that room runs low.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# nats-server's errors (server/errors.json) that say the store has no room.
ACCOUNT_RESOURCES_EXCEEDED = 10002  # the account's max_file reached
INSUFFICIENT_RESOURCES = 10023  # the server's max_file_store reached
STORAGE_RESOURCES_EXCEEDED = 10047  # a stream's reservation does not fit
STREAM_STORE_FAILED = 10077  # a stream's own limit, with discard new: "maximum bytes exceeded"
FULL_CODES = frozenset(
    {ACCOUNT_RESOURCES_EXCEEDED, INSUFFICIENT_RESOURCES, STORAGE_RESOURCES_EXCEEDED}
)
FULL_WORDS = ("maximum bytes exceeded", "insufficient storage", "insufficient resources")


def is_store_full(err_code: int | None, description: str | None) -> bool:
    """Whether JetStream refused a write for want of room."""
    if err_code in FULL_CODES:
        return True
    text = (description or "").lower()
    return err_code == STREAM_STORE_FAILED and any(w in text for w in FULL_WORDS)


def full_message(description: str | None) -> str:
    """What a client is told when the store refused its write."""
    said = f" ({description})" if description else ""
    return (
        f"the store is full: JetStream refused the write{said}; try again once space is "
        "freed (retention, a larger volume or HEDDLE_STORE_MAX_BYTES: docs/storage.md)"
    )


@dataclass(frozen=True, slots=True)
class StoreUse:
    """The account's stored and reserved bytes, and the limit they are held to (0: none
    known)."""

    used: int
    reserved: int
    limit: int

    @property
    def free(self) -> int | None:
        return None if self.limit <= 0 else max(self.limit - self.used, 0)


def limit_of(account_limit: int, setting: int) -> int:
    """The store's limit: the account's own (-1: none), which the server holds every write
    to and a reload may raise, else the setting (a server's whole store); 0: none known."""
    if account_limit > 0:
        return account_limit
    return max(setting, 0)


def admits_new_run(use: StoreUse, reserve: int) -> bool:
    """Whether a new run (or a new workflow) may take room: the reserve stays free for
    the runs under way (their outcomes, records and events)."""
    free = use.free
    return free is None or free > reserve


def refusal(use: StoreUse, reserve: int) -> str:
    """Why a new run is refused while the store is within its reserve."""
    return (
        f"the store is full: {use.used} of {use.limit} bytes used, and the last "
        f"{reserve} are kept for the runs under way; try again once space is freed "
        "(retention, a larger volume or HEDDLE_STORE_MAX_BYTES: docs/storage.md)"
    )


def log_bytes_to_free(use: StoreUse, reserve: int) -> int:
    """How many bytes of logs give way so that the reserve is free again (0: none)."""
    free = use.free
    if free is None or free >= reserve:
        return 0
    return reserve - free


def log_messages_to_keep(messages: int, stored_bytes: int, to_free: int) -> int:
    """How many of the newest log messages are kept when ``to_free`` bytes of the oldest
    give way, at the stream's average message size (never fewer than none)."""
    if to_free <= 0 or messages <= 0:
        return messages
    average = max(stored_bytes / messages, 1.0)
    return max(messages - math.ceil(to_free / average), 0)


def dropped_note(lines: int) -> str:
    """The note written into a step's log where its lines went missing."""
    noun = "line" if lines == 1 else "lines"
    return f"{lines} {noun} dropped: the store was full"
