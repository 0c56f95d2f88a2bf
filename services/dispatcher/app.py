"""The dispatcher: one free runner per ready step, never two steps on one runner.

It pulls ready steps from the HEDDLE_STEPS work queue only while runners are free, so a
saturated pool leaves steps in the stream (nothing dropped) and a runner that frees up gets
the next one at once. The steps of runs under way go before those that open a run: two
consumers, and a free runner goes to the first kind while one waits. An assignment is a
request to the runner's own subject; the ready message is acknowledged only once a runner
accepted it (``placing.py``). This module is the dispatcher around that: the connection,
the pulls and their credit, the pool's feed, autoscaling, shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from heddle.services.dispatcher.autoscaling import Autoscaling, packing
from heddle.services.dispatcher.hand import Hand
from heddle.services.dispatcher.placing import Lane, Placing
from heddle.services.dispatcher.pool import Pool, keys_of
from heddle.services.dispatcher.pool_feed import PoolFeed
from heddle.services.dispatcher.ready import LOOKAHEAD, ack_wait, ready_consumer, ready_durable
from heddle.services.dispatcher.waiting import WaitingLine
from heddle.shared.broker.nats_io import close, connect_until_ready
from heddle.shared.broker.nats_types import NatsError
from heddle.shared.broker.pull import ContinuousPull
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.broker.streams import ensure_consumer
from heddle.shared.core.runner_pools import PoolSpec, parse_pools
from heddle.shared.kube import client as kube
from heddle.shared.runtime.metrics import (
    READY_WAITING,
    RUNNERS,
    RUNNERS_BUSY,
    before_scrape,
    forget_before_scrape,
)
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.runtime.stalls import LoopStalls
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunnerInfo

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client, KeyValue

log = logging.getLogger("heddle.dispatcher")


class Dispatcher:
    name = "dispatcher"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Several dispatchers may run: each names itself in its logs and NATS connection.
        self.instance = settings.dispatcher_name or settings.pod_name or "dispatcher"
        self.pool = Pool(suspect_for=max(settings.assign_timeout * 2, 2.0))
        self._line = WaitingLine(self.pool.loads)  # ready steps in hand waiting for a runner
        self._feed = PoolFeed(self.pool, changed=self._wake)
        self._tasks: list[asyncio.Task] = []
        self._hand = Hand()
        # Half the acknowledgement wait: a message handled just after a longer stall may
        # have gone to another dispatcher meanwhile (shared/runtime/stalls.py).
        self.stalls = LoopStalls(ack_wait(settings) / 2)
        self._placing = Placing(
            settings,
            self.instance,
            self.pool,
            self._line,
            self._hand,
            self.stalls,
            recredit=self._recredit,
            wake=self._wake,
        )
        self._pulls: dict[Lane, ContinuousPull] = {}  # by lane, as Placing.unplaced
        self._lanes_seen = -1  # the pool's generation the label lanes were last made for
        self._nc: Client | None = None  # from start
        # The pool's view, read when scraped: nothing is counted per step.
        RUNNERS.set_function(lambda: len(self.pool.runners))
        RUNNERS_BUSY.set_function(lambda: len(self.pool.leases))
        self.autoscaling: Autoscaling | None = None
        self._backlog: int | None = None  # the ready steps the stream holds, as last asked
        self._backlog_by_lane: dict[Lane, int] | None = None
        # The label keys each pool of HEDDLE_RUNNER_POOLS serves: those of a pool that
        # autoscaling may grow get their lanes before any of its runners registers.
        self._pool_keys = pool_keys(parse_pools(settings.runner_pools))
        self._growable = frozenset().union(
            *(self._pool_keys[p.name] for p in parse_pools(settings.runner_pools) if p.autoscaling)
        )
        if settings.autoscale == "on":
            # Steps go to the lowest ordinals, so that the top ones (which a StatefulSet
            # removes) fall idle; a runner outside the scaled pools first, it costs them nothing.
            self.pool.pack = packing(settings)

    @property
    def nc_open(self) -> Client:
        if self._nc is None:
            raise RuntimeError("the dispatcher is not started")
        return self._nc

    @property
    def nc(self) -> Client | None:
        """The NATS connection once started: the readiness probe asks whether it is up."""
        return self._nc

    async def start(self) -> None:
        self._nc = nc = await connect_until_ready(
            self.settings, f"heddle-{self.instance}", on_reconnect=self._reconnected
        )
        res = await ensure_resources(
            nc,
            self.settings,
            streams=(names.STEPS_STREAM, names.EVENTS_STREAM),
            buckets=(names.RUNNERS_BUCKET, names.HEARTBEATS_BUCKET, names.RUNS_BUCKET),
        )
        self.js = res.js
        self.runners_kv: KeyValue = res.kv[names.RUNNERS_BUCKET]
        self.heartbeats_kv: KeyValue = res.kv[names.HEARTBEATS_BUCKET]
        self.runs_kv: KeyValue = res.kv[names.RUNS_BUCKET]
        self._placing.connect(nc, self.js, self.runs_kv)
        self.stalls.start()
        self._events_sub = await nc.subscribe(names.EVT_FINISHED_ALL, cb=self._feed.on_event)
        # Credit follows the free runners: a saturated pool leaves steps in the stream.
        for opening in (False, True):
            await self._add_lane(("", opening))
        before_scrape(self._count_waiting)
        initial = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._feed.follow(self.runners_kv, initial), name="runners")
        ]
        await asyncio.wait_for(initial.wait(), 10)
        await self._add_label_lanes()
        if self.settings.autoscale == "on":
            await self._start_autoscaling()
        event(log, "dispatching", dispatcher=self.instance)

    async def _add_lane(self, lane: Lane) -> None:
        """Pull the ready steps of one lane (its consumer made if it is not there yet)."""
        key, opening = lane
        await ensure_consumer(
            self.js, names.STEPS_STREAM, ready_consumer(self.settings, opening, key)
        )
        pull = ContinuousPull(
            self.nc_open,
            names.STEPS_STREAM,
            ready_durable(opening, key),
            self._placing.on_ready,
            credit=0,
        )
        await pull.start()
        self._pulls[lane] = pull

    async def _add_label_lanes(self) -> None:
        """A lane for every set of labels some registered runner has, once: its steps wait
        in the stream, not in this dispatcher's hand, while no runner can take them."""
        self._lanes_seen = self.pool.generation
        for key in sorted((self.pool.served() | self._growable) - {""}):
            if (key, False) not in self._pulls and not self._placing.stopping:
                try:
                    await self._add_lane((key, False))
                except NatsError as exc:  # tried again with the registry's next change
                    log.warning("no consumer for runners labelled %s yet: %s", key, exc)
                    self._lanes_seen = -1
                    return
                event(log, "lane opened", dispatcher=self.instance, labels=key)

    async def _start_autoscaling(self) -> None:
        autoscaling = Autoscaling(
            self.settings, self.pool, self._demand, changed=self._wake, refresh=self._ask_backlog
        )
        try:
            await autoscaling.start()
        except kube.KubeError as exc:
            log.error("autoscaling is on but cannot start: %s; the pool is not scaled", exc)
            return
        self.autoscaling = autoscaling

    def _waits(self) -> tuple[float, ...]:
        """Seconds each ready step in hand has waited for a runner (on this clock)."""
        return self._hand.waits(time.monotonic())

    def _demand(self, pool: str) -> tuple[tuple[float, ...], int | None]:
        """A pool's demand for autoscaling: the steps in hand, and in the stream, of the
        lanes its runners serve. Without HEDDLE_RUNNER_POOLS, all of it is the default
        pool's."""
        if not self._pool_keys:
            return self._waits(), self._backlog
        keys = self._pool_keys.get(pool, frozenset())
        lanes = self._placing.lanes
        held = self._hand.held(time.monotonic())
        waits = tuple(w for k, w in held.items() if k in lanes and lanes[k][0] in keys)
        if self._backlog_by_lane is None:
            return waits, None
        backlog = sum(n for lane, n in self._backlog_by_lane.items() if lane[0] in keys)
        return waits, backlog

    async def _ask_backlog(self) -> None:
        by_lane = await self._pending_by_lane()
        self._backlog_by_lane = by_lane
        self._backlog = None if by_lane is None else sum(by_lane.values())

    async def stop(self) -> None:
        placing = self._placing
        if placing.stopping:
            return
        placing.stopping = True
        forget_before_scrape(self._count_waiting)
        if self.autoscaling is not None:
            await self.autoscaling.stop()
        for pull in self._pulls.values():
            # Still subscribed: what the requests already out bring is given back at once.
            await pull.pause()
        self._line.close()  # the steps waiting for a runner go back to the stream (placing.py)
        await cancel_and_wait(*self._tasks)
        if placing.inflight:
            await asyncio.wait(placing.inflight, timeout=self.settings.shutdown_grace)
        for pull in self._pulls.values():
            await pull.stop()
        self.stalls.stop()
        await close(self._nc)

    async def _count_waiting(self) -> None:
        """Ready steps not given to a runner yet: those the stream still holds for this
        consumer, and those in hand without a runner. Left as it was if NATS is away."""
        pending = await self._pending()
        if pending is not None:
            READY_WAITING.set(pending + max(sum(self._placing.unplaced.values()), 0))

    async def _pending(self) -> int | None:
        """Ready steps the stream still holds for the lanes' consumers; None if not known."""
        by_lane = await self._pending_by_lane()
        return None if by_lane is None else sum(by_lane.values())

    async def _pending_by_lane(self) -> dict[Lane, int] | None:
        pending: dict[Lane, int] = {}
        for lane, pull in list(self._pulls.items()):
            try:
                info = await self.js.consumer_info(names.STEPS_STREAM, pull.durable, timeout=1.0)
            except NatsError as exc:  # its TimeoutError, a closed connection, the server's
                log.debug("ready backlog unknown: %s", exc)
                return None
            pending[lane] = info.num_pending or 0
        return pending

    async def _reconnected(self) -> None:
        self._hand.reconnected(time.monotonic())
        for pull in self._pulls.values():
            pull.reset()
            await pull.top_up()
        # KV watchers are ephemeral: start the registry watch again.
        if self._tasks and not self._placing.stopping:
            self._tasks[0].cancel()
            self._tasks[0] = asyncio.create_task(
                self._feed.follow(self.runners_kv, asyncio.Event())
            )

    async def _wake(self) -> None:
        """A runner may have become free (or busy): wake the steps waiting for one, and ask
        for more. The pull request is written in this turn of the loop, so it leaves in the
        same write as whatever else this turn sends (an acknowledgement, usually)."""
        self._line.wake(self._recredit())
        if not self._placing.stopping:
            if self.pool.generation != self._lanes_seen:
                await self._add_label_lanes()
            for pull in self._pulls.values():
                await pull.top_up()

    def _recredit(self) -> dict[str, int]:
        """Ask the server, for each lane, for as many steps as there are free runners that
        serve it, plus LOOKAHEAD, minus the lane's steps in hand that no runner is reserved
        for yet. Returns the free runners by label key."""
        free_by_key = self.pool.free_by_key()
        unplaced_by_lane = self._placing.unplaced
        # A free runner with no step in hand for it is served at once; the lookahead
        # alone is refilled half at a time, so a saturated pool asks once per few steps.
        for lane, pull in self._pulls.items():
            key = lane[0]
            if key and key not in self.pool.served() and key not in self._growable:
                pull.set_credit(0)  # no runner has these labels now: its steps stay stored
                continue
            free = free_by_key.get(key, 0)
            unplaced = unplaced_by_lane.get(lane, 0)
            at_least = 1 if free > unplaced else LOOKAHEAD // 2
            pull.set_credit(max(free + LOOKAHEAD - unplaced, 0), at_least)
        return free_by_key


def pool_keys(pools: list[PoolSpec]) -> dict[str, frozenset[str]]:
    """The label keys each pool's runners serve (pool.py, ``keys_of``)."""
    return {
        p.name: keys_of(
            RunnerInfo(
                name="",
                status="idle",
                pid=0,
                version="",
                started_at="",
                seen_at="",
                pool=p.name,
                labels=list(p.labels),
            )
        )
        for p in pools
    }
