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
from heddle.services.dispatcher.lanes import Lanes, pool_keys
from heddle.services.dispatcher.placing import Lane, Placing
from heddle.services.dispatcher.pool import Pool
from heddle.services.dispatcher.pool_feed import PoolFeed
from heddle.services.dispatcher.ready import ack_wait
from heddle.services.dispatcher.waiting import WaitingLine
from heddle.shared.broker.nats_io import close, connect_until_ready
from heddle.shared.broker.offers import OfferDesk
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.core.labels import DEFAULT_POOL
from heddle.shared.core.runner_pools import parse_pools
from heddle.shared.kube import client as kube
from heddle.shared.runtime.metrics import (
    READY_WAITING,
    RUNNERS,
    RUNNERS_BUSY,
    WAITING_OLDEST,
    WAITING_STEPS,
    before_scrape,
    forget_before_scrape,
)
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.runtime.stalls import LoopStalls
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire import names

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
        # Ready steps in hand waiting for a runner.
        self._line = WaitingLine(self.pool.loads, self.pool.serving)
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
        self._nc: Client | None = None  # from start
        # The pool's view, read when scraped: nothing is counted per step.
        RUNNERS.set_function(lambda: len(self.pool.runners))
        RUNNERS_BUSY.set_function(lambda: len(self.pool.leases))
        self.autoscaling: Autoscaling | None = None
        self._backlog: int | None = None  # the ready steps the stream holds, as last asked
        self._backlog_by_lane: dict[Lane, int] | None = None
        self._series_seen: set[tuple[str, str]] = set()  # the wait series set, to zero
        # The label keys each pool of HEDDLE_RUNNER_POOLS serves: those of a pool that
        # autoscaling may grow get their lanes before any of its runners registers.
        pools = parse_pools(settings.runner_pools)
        self._pool_keys = pool_keys(pools)
        growable = frozenset().union(*(self._pool_keys[p.name] for p in pools if p.autoscaling))
        self._lanes = Lanes(settings, self.instance, self.pool, self._placing.on_ready, growable)
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
        desk = OfferDesk(nc)
        await desk.start()
        self._feed.heard = desk.heard
        self._placing.connect(desk, self.js, self.runs_kv)
        self.stalls.start()
        self._events_sub = await nc.subscribe(names.EVT_FINISHED_ALL, cb=self._feed.on_event)
        # Credit follows the free runners: a saturated pool leaves steps in the stream.
        for opening in (False, True):
            await self._lanes.add(nc, self.js, ("", opening))
        before_scrape(self._count_waiting)
        initial = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._feed.follow(self.runners_kv, initial), name="runners")
        ]
        await asyncio.wait_for(initial.wait(), 10)
        await self._lanes.add_labelled(nc, self.js)
        if self.settings.autoscale == "on":
            await self._start_autoscaling()
        event(log, "dispatching", dispatcher=self.instance)

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
        by_lane = await self._lanes.pending(self.js)
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
        for pull in self._lanes.pulls.values():
            # Still subscribed: what the requests already out bring is given back at once.
            await pull.pause()
        self._line.close()  # the steps waiting for a runner go back to the stream (placing.py)
        await cancel_and_wait(*self._tasks)
        if placing.inflight:
            await asyncio.wait(placing.inflight, timeout=self.settings.shutdown_grace)
        for pull in self._lanes.pulls.values():
            await pull.stop()
        self.stalls.stop()
        await close(self._nc)

    async def _count_waiting(self) -> None:
        """Ready steps not given to a runner yet: those the stream still holds for this
        dispatcher's lanes, and those in hand without a runner, in all and by pool; with how
        long the longest in hand has waited. Left as they were if NATS is away."""
        by_lane = await self._lanes.pending(self.js)
        if by_lane is None:
            return
        unplaced = self._placing.unplaced
        READY_WAITING.set(sum(by_lane.values()) + max(sum(unplaced.values()), 0))
        held = self._hand.held(time.monotonic())
        lanes = self._placing.lanes
        found: dict[tuple[str, str], list[float]] = {}
        for lane in by_lane.keys() | unplaced.keys():
            if lane[0] and lane[0] not in self.pool.served():
                continue  # no runner has these labels: the orchestrator counts them
            counts = found.setdefault((lane[0] or DEFAULT_POOL, "runners-busy"), [0, 0.0])
            counts[0] += by_lane.get(lane, 0) + max(unplaced.get(lane, 0), 0)
        for attempt, waited in held.items():
            in_lane = lanes.get(attempt)
            if (
                in_lane is not None
                and (series := (in_lane[0] or DEFAULT_POOL, "runners-busy")) in found
            ):
                found[series][1] = max(found[series][1], waited)
        for series in self._series_seen - found.keys():
            WAITING_STEPS.labels(*series).set(0)
            WAITING_OLDEST.labels(*series).set(0)
        for series, (count, oldest) in found.items():
            WAITING_STEPS.labels(*series).set(count)
            WAITING_OLDEST.labels(*series).set(round(oldest, 3))
        self._series_seen |= found.keys()

    async def _reconnected(self) -> None:
        self._hand.reconnected(time.monotonic())
        for pull in self._lanes.pulls.values():
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
            if self.pool.generation != self._lanes.seen:
                await self._lanes.add_labelled(self.nc_open, self.js)
            for pull in self._lanes.pulls.values():
                await pull.top_up()

    def _recredit(self) -> dict[str, int]:
        """The lanes' credit set again; the free runners by label key. A step in hand that
        no free runner may take, for its namespace, holds no credit (waiting.py, unfit)."""
        unplaced = self._placing.unplaced
        if self.pool.namespaces:
            unplaced = {lane: n - self._line.unfit(*lane) for lane, n in unplaced.items()}
        return self._lanes.recredit(unplaced)
