"""A dispatcher's lanes: one pull of ready steps per consumer (the default pool's steps of
runs under way and those that open a run, and one per set of runner labels), each with
credit from the free runners that serve it (docs/pools.md, "No head-of-line blocking")."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from heddle.services.dispatcher.placing import Lane
from heddle.services.dispatcher.pool import Pool, keys_of
from heddle.services.dispatcher.ready import LOOKAHEAD, ready_consumer, ready_durable
from heddle.shared.broker.nats_types import NatsError
from heddle.shared.broker.pull import ContinuousPull
from heddle.shared.broker.streams import ensure_consumer
from heddle.shared.core.runner_pools import PoolSpec
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

if TYPE_CHECKING:
    from heddle.shared.broker.consume import Outcome
    from heddle.shared.broker.nats_types import Client, JetStreamContext, Msg

log = logging.getLogger("heddle.dispatcher")


class Lanes:
    def __init__(
        self,
        settings: Settings,
        instance: str,
        pool: Pool,
        on_ready: Callable[[Msg], Awaitable[Outcome]],
        growable: frozenset[str],
    ) -> None:
        self.settings = settings
        self.instance = instance
        self.pool = pool
        self.on_ready = on_ready
        self.growable = growable  # keys of pools autoscaling may grow: pulled with no runner
        self.pulls: dict[Lane, ContinuousPull] = {}  # by lane, as Placing.unplaced
        self.seen = -1  # the pool's generation the label lanes were last made for

    async def add(self, nc: Client, js: JetStreamContext, lane: Lane) -> None:
        """Pull the ready steps of one lane (its consumer made if it is not there yet)."""
        key, opening = lane
        await ensure_consumer(js, names.STEPS_STREAM, ready_consumer(self.settings, opening, key))
        durable = ready_durable(opening, key)
        pull = ContinuousPull(nc, names.STEPS_STREAM, durable, self.on_ready, credit=0)
        await pull.start()
        self.pulls[lane] = pull

    async def add_labelled(self, nc: Client, js: JetStreamContext) -> None:
        """A lane for every set of labels some registered runner has, once: its steps wait
        in the stream, not in this dispatcher's hand, while no runner can take them."""
        self.seen = self.pool.generation
        for key in sorted((self.pool.served() | self.growable) - {""}):
            if (key, False) not in self.pulls:
                try:
                    await self.add(nc, js, (key, False))
                except NatsError as exc:  # tried again with the registry's next change
                    log.warning("no consumer for runners labelled %s yet: %s", key, exc)
                    self.seen = -1
                    return
                event(log, "lane opened", dispatcher=self.instance, labels=key)

    def recredit(self, unplaced_by_lane: dict[Lane, int]) -> dict[str, int]:
        """Ask the server, for each lane, for as many steps as there are free runners that
        serve it, plus LOOKAHEAD, minus the lane's steps in hand that no runner is reserved
        for yet. Returns the free runners by label key."""
        free_by_key = self.pool.free_by_key()
        served = self.pool.served()
        # A free runner with no step in hand for it is served at once; the lookahead
        # alone is refilled half at a time, so a saturated pool asks once per few steps.
        for lane, pull in self.pulls.items():
            key = lane[0]
            if key and key not in served and key not in self.growable:
                pull.set_credit(0)  # no runner has these labels now: its steps stay stored
                continue
            free = free_by_key.get(key, 0)
            unplaced = unplaced_by_lane.get(lane, 0)
            at_least = 1 if free > unplaced else LOOKAHEAD // 2
            pull.set_credit(max(free + LOOKAHEAD - unplaced, 0), at_least)
        return free_by_key

    async def pending(self, js: JetStreamContext) -> dict[Lane, int] | None:
        """Ready steps the stream still holds for each lane's consumer; None if not known."""
        pending: dict[Lane, int] = {}
        for lane, pull in list(self.pulls.items()):
            try:
                info = await js.consumer_info(names.STEPS_STREAM, pull.durable, timeout=1.0)
            except NatsError as exc:  # its TimeoutError, a closed connection, the server's
                log.debug("ready backlog unknown: %s", exc)
                return None
            pending[lane] = info.num_pending or 0
        return pending


def pool_keys(pools: list[PoolSpec]) -> dict[str, frozenset[str]]:
    """The label keys each pool's runners serve (pool.py, ``keys_of``)."""
    return {p.name: keys_of(p.name, p.labels) for p in pools}
