"""An orchestrator's membership and its partitions, kept in the heddle-leases bucket.

Keys: ``member.<name>``, renewed by its orchestrator every third of the lease's time, and
``part.<n>``, naming the holder of partition n, written only when it changes hands. Every
write is a compare-and-set on the revision last seen, so two orchestrators never both
believe they took a partition, and a member declared gone finds out at its next renewal.

Silence is judged by receipt, like the watchdog's: a member whose key nobody has seen
change for ``HEDDLE_LEASE_TTL`` (on the observer's monotonic clock) is gone; a taker first
deletes its member key (compare-and-set: a member that renewed meanwhile keeps it), then
takes its partitions. A holder acts only while its last successful renewal was sent less
than the lease's time ago (``fresh``), so it stops before any observer can have judged it
silent. An outage is not a death: after a reconnect or a watch restart, silence counts from
when the view has caught up again. ``lease_view.py`` keeps what the watch shows,
``ownership.py`` decides the moves, ``partition_keys.py`` writes the keys they change; this
module renews the member key, makes the rounds, and hands the partitions it takes and gives
to its owner (partitions.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import socket
import time
from typing import Protocol

import msgspec
from heddle.services.orchestrator.lease_view import (
    MEMBER,
    LeaseView,
    holder_of,
    lease_value,
)
from heddle.services.orchestrator.ownership import Holder, moves
from heddle.services.orchestrator.partition_keys import PartitionKeys
from heddle.shared.broker.cut_off import CutOff
from heddle.shared.broker.kv_watch import follow
from heddle.shared.broker.nats_types import (
    KeyValue,
    KeyWrongLastSequenceError,
    NatsError,
    NotFoundError,
)
from heddle.shared.runtime.metrics import PARTITIONS_HELD
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire.errors import AcknowledgementLost

log = logging.getLogger("heddle.orchestrator")


class PartitionOwner(Protocol):
    """What the partitions this orchestrator takes and gives are handed to (partitions.py)."""

    async def take(self, parts: set[int]) -> None:
        """Just acquired: act on them. A take that raises is given back at once."""
        ...

    async def give(self, parts: set[int], lost: bool) -> None:
        """Given away (``lost`` False: drain first) or lost (another may hold them now)."""
        ...


def member_name(settings: Settings) -> str:
    """This orchestrator's name among the members: HEDDLE_ORCHESTRATOR_NAME, else the pod's
    name, else <host>-<pid>, made fit for a key."""
    name = settings.orchestrator_name or settings.pod_name
    name = name or f"{socket.gethostname()}-{os.getpid()}"
    return re.sub(r"[^A-Za-z0-9_-]", "-", name)[:64]


class Leases:
    def __init__(self, kv: KeyValue, settings: Settings, name: str) -> None:
        self.kv = kv
        self.ttl = settings.lease_ttl
        self.partitions = settings.partitions
        self.me = Holder(name, secrets.token_hex(4))
        self.held: set[int] = set()
        self._owner: PartitionOwner | None = None  # from start
        self.view = LeaseView(self.ttl)  # the bucket as this orchestrator has seen it
        self._member_revision = 0
        self._renewed_at = -float("inf")
        self._renewal = asyncio.Event()  # set (and replaced) at each renewal
        self.cut = CutOff()  # a round's requests give up when the connection drops
        self.keys = PartitionKeys(kv, self.view, self.me, self.cut, self.ttl)
        self._lock = asyncio.Lock()  # one move at a time: a take never overlaps a give
        self._watch: asyncio.Task[None] | None = None
        self._looping: asyncio.Task[None] | None = None

    def fresh(self) -> bool:
        """Whether this orchestrator may act on its partitions now."""
        return time.monotonic() - self._renewed_at < self.ttl

    async def until_fresh(self) -> None:
        """Until a renewal makes the lease fresh again (cancelled with the runs if it
        finds them lost instead)."""
        while not self.fresh():
            await self._renewal.wait()

    def _renewed(self, sent: float) -> None:
        self._renewed_at = sent
        renewal, self._renewal = self._renewal, asyncio.Event()
        renewal.set()  # wakes every writer waiting on this one

    async def start(self, owner: PartitionOwner) -> None:
        """Join, and make the first moves once the bucket's current keys are read: every
        partition taken or given from now on is handed to ``owner``."""
        self._owner = owner
        self._watch = self._watching()
        await self._join()
        await self.view.caught_up.wait()
        await self.step()
        self._looping = asyncio.create_task(self._loop(), name="leases")

    async def stop(self) -> None:
        """Give every partition back (its runs drained) and leave."""
        await cancel_and_wait(self._looping)
        self._looping = None
        async with self._lock:
            await self._give(set(self.held))
            await self._leave()
        await self.halt()

    async def halt(self) -> None:
        """Stop renewing and moving, keeping what it holds: what a frozen or dead process
        looks like to the others (the tests' freeze; ``step`` afterwards is its return)."""
        await cancel_and_wait(self._looping, self._watch)
        self._looping = self._watch = None

    def disconnected(self) -> None:
        """Cut off from the server: no moves, and nobody judged, until caught up again; a
        request of the round waiting for its answer gives up (``CutOff``): its answer went
        with the connection, and waiting out its timeout would hold every renewal after the
        reconnect that long, so that the others would judge this member silent."""
        self.view.caught_up.clear()
        self.cut.dropped()

    def reconnected(self) -> None:
        """Back: a fresh watch, as the old one's consumer may have gone with the server
        without a word (nats-py's ordered consumer sees nothing for seconds)."""
        self.view.caught_up.clear()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = self._watching()

    def _watching(self) -> asyncio.Task[None]:
        watch = follow(
            self.kv,
            self.view.on_entry,
            what="leases",
            log=log,
            on_caught_up=self.view.whole,
            on_restart=self.view.caught_up.clear,
        )
        return asyncio.create_task(watch, name="leases watch")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 6)
            try:
                await self.step()
            except (NatsError, AcknowledgementLost) as exc:  # the next round tries again
                log.warning("lease round failed: %s", exc)
            except Exception:  # anything else too: a loop that ended would never renew again
                log.exception("lease round failed")

    async def step(self) -> None:
        async with self._lock:
            if time.monotonic() - self._renewed_at >= self.ttl / 3:
                await self._renew()
            if not self.view.caught_up.is_set():
                return
            lost = {p for p in self.held if self.view.holder(p) != self.me}
            if lost:
                event(log, "partitions lost", partitions=sorted(lost), to="another holder")
                await self._release(lost, lost=True)
            alive = self.view.alive()
            # A key naming this life that it no longer holds (it lost it) is a stale claim.
            stale = Holder(self.me.name, "")
            holders = {
                p: stale if s.holder == self.me and p not in self.held else s.holder
                for p, s in self.view.parts.items()
            }
            wanted = moves(self.me, alive, holders, self.partitions)
            if wanted.give:
                await self._give(set(wanted.give))
            if wanted.free:
                await self.keys.free(set(wanted.free))
            if wanted.take:
                await self._take(set(wanted.take))

    # ---- membership ----

    async def _join(self) -> None:
        sent = time.monotonic()
        value = lease_value(self.me)
        self._member_revision = await self.kv.put(MEMBER + self.me.name, value)
        self._renewed(sent)
        event(log, "joined", orchestrator=self.me.name, life=self.me.life)

    async def _renew(self) -> None:
        key, value = MEMBER + self.me.name, lease_value(self.me)
        for _ in range(2):  # a second try with the revision adopted below
            sent = time.monotonic()
            try:
                self._member_revision = await self.cut.unless_dropped(
                    self.kv.update(key, value, last=self._member_revision), key
                )
            except KeyWrongLastSequenceError:
                revision = await self.cut.unless_dropped(self._own_revision(), key)
                if revision is None:
                    # Judged silent and replaced: whatever this life held is another's now.
                    event(log, "partitions lost", partitions=sorted(self.held), to="judged silent")
                    await self._release(set(self.held), lost=True)
                    await self._join()
                    return
                # A renewal that timed out, applied after all once nats-py reconnected and
                # sent what it had buffered: nobody judged this life, it carries on.
                self._member_revision = revision
                continue
            self._renewed(sent)
            return

    async def _leave(self) -> None:
        """Delete the member key, so the others move at once rather than after the lease."""
        revision: int | None = self._member_revision
        for _ in range(2):  # a second try with the revision adopted below
            try:
                await self.kv.delete(MEMBER + self.me.name, last=revision)
                return
            except KeyWrongLastSequenceError:
                # A renewal that timed out but was applied (as in _renew): adopt its revision.
                revision = await self._own_revision()
                if revision is None:
                    return  # judged silent and declared gone already
            except NatsError as exc:  # the others find it silent instead
                log.warning("leaving the members failed: %s", exc)
                return

    async def _own_revision(self) -> int | None:
        """The member key's revision while it still names this life, else None."""
        try:
            entry = await self.kv.get(MEMBER + self.me.name)
            holder = holder_of(entry.value or b"")
        except (NotFoundError, msgspec.DecodeError):  # deleted (declared gone), or not a lease
            return None
        return entry.revision if holder == self.me else None

    # ---- partitions ----

    async def _take(self, parts: set[int]) -> None:
        alive = self.view.alive()  # as it is now: the watch may have moved since the moves
        gone = {h.name for p in parts if (h := self.view.holder(p)) and h.name not in alive}
        for name in gone - {self.me.name}:
            member = self.view.members.get(name)
            if member is not None and not await self.keys.declare_gone(name, member.revision):
                parts = {p for p in parts if (h := self.view.holder(p)) is None or h.name != name}
        got = {p for p in parts if await self.keys.acquire(p)}
        if not got:
            return
        assert self._owner is not None  # start's: no move is made before it
        self.held |= got
        PARTITIONS_HELD.set(len(self.held))
        try:
            await self._owner.take(got)
        except Exception:  # any failure (a reset refused, a rebuild's odd answer) fails the take
            log.warning("taking partitions %s failed; giving them back", sorted(got), exc_info=True)
            await self._give(got)

    async def _give(self, parts: set[int]) -> None:
        """Hand partitions back: their runs drained first, then their keys freed."""
        if not parts:
            return
        await self._release(parts, lost=False)
        await self.keys.free(parts)
        event(log, "partitions given", partitions=sorted(parts), held=len(self.held))

    async def _release(self, parts: set[int], lost: bool) -> None:
        """No longer held: the owner lets their runs go (drained first unless ``lost``)."""
        assert self._owner is not None  # start's: nothing is held before it
        self.held -= parts
        PARTITIONS_HELD.set(len(self.held))
        await self._owner.give(parts, lost)
