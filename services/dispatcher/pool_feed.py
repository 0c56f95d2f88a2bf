"""What keeps a dispatcher's view of the pool (pool.py) current: the runner registry, and
the ``finished`` events, which end leases (every dispatcher receives them all)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec
from heddle.services.dispatcher.pool import Pool
from heddle.shared.broker.kv_watch import follow
from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepFinished, event_decoder, runner_info_decoder

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import KeyValue, Msg

log = logging.getLogger("heddle.dispatcher")


class PoolFeed:
    def __init__(self, pool: Pool, changed: Callable[[], Awaitable[None]]) -> None:
        self.pool = pool
        self.changed = changed  # a runner may have become free (or busy)
        # An outcome told to the offers' desk, after its lease: it answers an offer of
        # its attempt (shared/broker/offers.py, OfferDesk).
        self.heard: Callable[[StepFinished], None] | None = None

    async def follow(self, runners_kv: KeyValue, initial: asyncio.Event) -> None:
        """The registry, from its current entries (``initial`` set once they are read) on."""
        await follow(runners_kv, self.on_registry, what="runner", log=log, on_caught_up=initial.set)

    async def on_registry(self, entry: KeyValue.Entry) -> None:
        if entry.operation in ("DEL", "PURGE") or not entry.value:
            lease = self.pool.remove(entry.key)
            event(
                log,
                "runner left",
                runner=entry.key,
                lease=f"{lease.run_id}/{lease.step_id}" if lease else None,
            )
        else:
            info = runner_info_decoder.decode(entry.value)
            if info.name != entry.key:  # a runner writes its own key alone
                log.warning("registry entry %s names runner %r: ignored", entry.key, info.name)
                return
            if info.name not in self.pool.runners:
                event(log, "runner joined", runner=info.name)
            self.pool.update(info)
        await self.changed()

    async def on_event(self, msg: Msg) -> None:
        try:
            ev = event_decoder.decode(msg.data)
        except msgspec.DecodeError:
            return
        if names.evt_runner(msg.subject) != ev.runner:
            return  # not from the runner it names (the orchestrator logs it)
        if not isinstance(ev, StepFinished):
            return
        freed = self.pool.release(
            ev.runner, ev.run_id, ev.step_id, ev.attempt, ev.continued, jobs=ev.jobs
        )
        if self.heard is not None:
            self.heard(ev)
        if freed:
            await self.changed()
