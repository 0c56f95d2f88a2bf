"""The compare-and-set writes an orchestrator's lease rounds make to the heddle-leases bucket
besides its own member key (leases.py): a silent member declared gone, a partition taken,
and the keys of its own name freed. Each is given up if the connection drops while it waits
(``CutOff``): the round ends, and the next one takes or frees what it left."""

from __future__ import annotations

import logging

from heddle.services.orchestrator.lease_view import MEMBER, PART, LeaseView, lease_value
from heddle.services.orchestrator.ownership import Holder, live_holder
from heddle.shared.broker.cut_off import CutOff
from heddle.shared.broker.nats_types import KeyValue, KeyWrongLastSequenceError, NatsError
from heddle.shared.runtime.service import event
from heddle.shared.wire.errors import AcknowledgementLost

log = logging.getLogger("heddle.orchestrator")


class PartitionKeys:
    def __init__(self, kv: KeyValue, view: LeaseView, me: Holder, cut: CutOff, ttl: float) -> None:
        self.kv = kv
        self.view = view  # updated here as each write is answered, before the watch shows it
        self.me = me
        self.cut = cut
        self.ttl = ttl

    async def declare_gone(self, name: str, revision: int) -> bool:
        """Delete a silent member's key; False if it renewed meanwhile."""
        key = MEMBER + name
        try:
            await self.cut.unless_dropped(self.kv.delete(key, last=revision), key)
        except NatsError:  # it renewed meanwhile (a compare-and-set that failed): alive
            return False
        self.view.members.pop(name, None)
        event(log, "orchestrator gone", orchestrator=name, silent_for_s=self.ttl)
        return True

    async def acquire(self, p: int) -> bool:
        """Write partition ``p``'s key for this life; False if a live member has it."""
        key, value = f"{PART}{p}", lease_value(self.me)
        seen = self.view.parts.get(p)
        if seen is not None and live_holder(seen.holder, self.me, self.view.alive()):
            return False  # a live member took it since the moves were decided
        try:
            if seen is None:
                revision = await self.cut.unless_dropped(self.kv.create(key, value), key)
            else:
                revision = await self.cut.unless_dropped(
                    self.kv.update(key, value, last=seen.revision), key
                )
        except KeyWrongLastSequenceError:
            return False  # another took it first
        self.view.took(p, self.me, revision)
        return True

    async def free(self, parts: set[int]) -> None:
        """Delete the keys of ``parts`` that name this member, so that the member each is
        assigned to takes it. A delete that fails (taken meanwhile, or lost with the broker)
        leaves a key of this name that it does not act on: a later round frees it."""
        for p in parts:
            seen = self.view.parts.get(p)
            if seen is None or seen.holder.name != self.me.name:
                continue
            key = f"{PART}{p}"
            try:
                await self.cut.unless_dropped(self.kv.delete(key, last=seen.revision), key)
            except (NatsError, AcknowledgementLost) as exc:  # the view keeps the key meanwhile
                log.warning("freeing partition %d failed: %s", p, exc)
            else:
                self.view.parts.pop(p, None)
