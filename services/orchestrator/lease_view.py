"""What an orchestrator has seen of the heddle-leases bucket, by receipt: leases.py keeps it
current through a watch of the bucket, and makes its moves on it.

Each key is kept with its holder, its revision and the monotonic time it was received here.
A member whose key nobody has seen change for the lease's time is silent (``alive``). An
outage is not a death: after a reconnect or a watch restart, silence counts from when the
view has caught up again (``whole``)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import msgspec
from heddle.services.orchestrator.ownership import Holder
from heddle.shared.broker.nats_types import KeyValue

log = logging.getLogger("heddle.orchestrator")

MEMBER = "member."
PART = "part."


class Lease(msgspec.Struct, frozen=True):
    name: str
    life: str


_decode = msgspec.json.Decoder(Lease).decode


def lease_value(holder: Holder) -> bytes:
    """A key's value naming ``holder``: a member's own key, or a partition it holds."""
    return msgspec.json.encode(Lease(holder.name, holder.life))


def holder_of(value: bytes) -> Holder:
    """The holder a key's value names; msgspec.DecodeError if it is not a lease."""
    lease = _decode(value)
    return Holder(lease.name, lease.life)


@dataclass(slots=True)
class Seen:
    holder: Holder
    revision: int
    at: float  # monotonic time of receipt


class LeaseView:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.members: dict[str, Seen] = {}
        self.parts: dict[int, Seen] = {}
        self.caught_up = asyncio.Event()  # the current keys are read: moves may be made
        self._whole_since = float("inf")  # when the view last caught up (start, reconnect)

    def whole(self) -> None:
        # An outage is not a death: silence counts from when the view is whole again, since
        # neither the replay nor a renewal sent before the outage says when a member last spoke.
        self._whole_since = time.monotonic()
        self.caught_up.set()

    def holder(self, p: int) -> Holder | None:
        seen = self.parts.get(p)
        return seen.holder if seen else None

    def alive(self) -> set[str]:
        now, whole = time.monotonic(), self._whole_since
        return {n for n, s in self.members.items() if now - max(s.at, whole) < self.ttl}

    def took(self, p: int, holder: Holder, revision: int) -> None:
        """Partition ``p`` written by this orchestrator, before its watch shows it."""
        self.parts[p] = Seen(holder, revision, time.monotonic())

    async def on_entry(self, entry: KeyValue.Entry) -> None:
        key, revision = entry.key, entry.revision or 0
        if key.startswith(MEMBER):
            self._seen(self.members, key[len(MEMBER) :], entry, revision)
        elif key.startswith(PART) and key[len(PART) :].isdigit():
            self._seen(self.parts, int(key[len(PART) :]), entry, revision)

    @staticmethod
    def _seen(table: dict, key: object, entry: KeyValue.Entry, revision: int) -> None:
        known = table.get(key)
        if known is not None and known.revision >= revision:
            return  # older than what this process wrote or saw
        if entry.operation in ("DEL", "PURGE") or not entry.value:
            table.pop(key, None)
            return
        try:
            holder = holder_of(entry.value)
        except msgspec.DecodeError:
            log.warning("undecodable lease %s", entry.key)
            return
        table[key] = Seen(holder, revision, time.monotonic())
