"""The dispatcher: one free runner per ready step, never two steps on one runner.

It pulls ready steps from the HEDDLE_STEPS work queue only while runners are free, so a
saturated pool leaves steps in the stream (nothing dropped) and a runner that frees up gets
the next one at once. The steps of runs under way go before those that open a run: two
consumers, and a free runner goes to the first kind while one waits. An assignment is a
request to the runner's own subject; the ready message is acknowledged only once a runner
accepted it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import msgspec
from heddle.services.dispatcher.autoscale import ordinal_of
from heddle.services.dispatcher.autoscaling import Autoscaling
from heddle.services.dispatcher.checks import already_taken
from heddle.services.dispatcher.hand import AttemptKey, Hand
from heddle.services.dispatcher.pool import Pool
from heddle.services.dispatcher.pool_feed import PoolFeed
from heddle.services.dispatcher.ready import (
    HELD_LIMIT,
    LOOKAHEAD,
    ack_wait,
    ready_consumer,
    ready_durable,
)
from heddle.services.dispatcher.waiting import WaitingLine
from heddle.shared.broker.consume import Outcome, redelivered, settle
from heddle.shared.broker.nats_io import close, connect_until_ready
from heddle.shared.broker.nats_types import NatsError
from heddle.shared.broker.offers import Answer, Offered, offer
from heddle.shared.broker.pull import ContinuousPull
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.broker.streams import ensure_consumer
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
from heddle.shared.wire.contracts import AssignReply, StepReady, step_ready_decoder

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client, KeyValue, Msg

log = logging.getLogger("heddle.dispatcher")


class Dispatcher:
    name = "dispatcher"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Several dispatchers may run: each names itself in its logs and NATS connection.
        self.instance = settings.dispatcher_name or settings.pod_name or "dispatcher"
        self.pool = Pool(suspect_for=max(settings.assign_timeout * 2, 2.0))
        self._line = WaitingLine()  # ready steps in hand waiting for a free runner
        self._feed = PoolFeed(self.pool, changed=self._wake)
        self._tasks: list[asyncio.Task] = []
        self._inflight: set[asyncio.Task] = set()
        # Ready messages in hand that no runner is reserved for, of runs under way (False)
        # and that open a run (True).
        self._unplaced = {False: 0, True: 0}
        self._hand = Hand()
        # Half the acknowledgement wait: a message handled just after a longer stall may
        # have gone to another dispatcher meanwhile (shared/runtime/stalls.py).
        self.stalls = LoopStalls(ack_wait(settings) / 2)
        self._stopping = False
        self._pulls: dict[bool, ContinuousPull] = {}  # by kind, as _unplaced
        self._nc: Client | None = None  # from start (the nc property)
        # The pool's view, read when scraped: nothing is counted per step.
        RUNNERS.set_function(lambda: len(self.pool.runners))
        RUNNERS_BUSY.set_function(lambda: len(self.pool.leases))
        self.autoscaling: Autoscaling | None = None
        if settings.autoscale == "on":
            # Steps go to the lowest ordinals, so that the top ones (which a StatefulSet
            # removes) fall idle; a runner outside the scaled pool first, it costs it nothing.
            prefix = settings.runner_statefulset_prefix
            self.pool.pack = lambda name: _or_first(ordinal_of(name, prefix))

    @property
    def nc(self) -> Client:
        """The NATS connection, made by ``start``."""
        if self._nc is None:
            raise RuntimeError("the dispatcher is not started")
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
        self.stalls.start()
        self._events_sub = await nc.subscribe(names.EVT_FINISHED_ALL, cb=self._feed.on_event)
        # Credit follows the free runners: a saturated pool leaves steps in the stream.
        for opening in (False, True):
            config = ready_consumer(self.settings, opening)
            await ensure_consumer(self.js, names.STEPS_STREAM, config)
            pull = ContinuousPull(
                nc, names.STEPS_STREAM, ready_durable(opening), self._on_ready, credit=0
            )
            await pull.start()
            self._pulls[opening] = pull
        before_scrape(self._count_waiting)
        initial = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._feed.follow(self.runners_kv, initial), name="runners")
        ]
        await asyncio.wait_for(initial.wait(), 10)
        if self.settings.autoscale == "on":
            await self._start_autoscaling()
        event(log, "dispatching", dispatcher=self.instance)

    async def _start_autoscaling(self) -> None:
        autoscaling = Autoscaling(
            self.settings, self.pool, self._waits, self._pending, changed=self._wake
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

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        forget_before_scrape(self._count_waiting)
        if self.autoscaling is not None:
            await self.autoscaling.stop()
        for pull in self._pulls.values():
            # Still subscribed: what the requests already out bring is given back at once.
            await pull.pause()
        self._line.close()  # the steps waiting for a runner go back to the stream (_place)
        await cancel_and_wait(*self._tasks)
        if self._inflight:
            await asyncio.wait(self._inflight, timeout=self.settings.shutdown_grace)
        for pull in self._pulls.values():
            await pull.stop()
        self.stalls.stop()
        await close(self._nc)

    async def _count_waiting(self) -> None:
        """Ready steps not given to a runner yet: those the stream still holds for this
        consumer, and those in hand without a runner. Left as it was if NATS is away."""
        pending = await self._pending()
        if pending is not None:
            READY_WAITING.set(pending + max(sum(self._unplaced.values()), 0))

    async def _pending(self) -> int | None:
        """Ready steps the stream still holds for the two consumers; None if not known."""
        pending = 0
        for pull in self._pulls.values():
            try:
                info = await self.js.consumer_info(names.STEPS_STREAM, pull.durable, timeout=1.0)
            except NatsError as exc:  # its TimeoutError, a closed connection, the server's
                log.debug("ready backlog unknown: %s", exc)
                return None
            pending += info.num_pending or 0
        return pending

    async def _reconnected(self) -> None:
        self._hand.reconnected(time.monotonic())
        for pull in self._pulls.values():
            pull.reset()
            await pull.top_up()
        # KV watchers are ephemeral: start the registry watch again.
        if self._tasks and not self._stopping:
            self._tasks[0].cancel()
            self._tasks[0] = asyncio.create_task(
                self._feed.follow(self.runners_kv, asyncio.Event())
            )

    async def _wake(self) -> None:
        """A runner may have become free (or busy): wake the steps waiting for one, and ask
        for more. The pull request is written in this turn of the loop, so it leaves in the
        same write as whatever else this turn sends (an acknowledgement, usually)."""
        self._line.wake(self._recredit())
        if not self._stopping:
            for pull in self._pulls.values():
                await pull.top_up()

    def _recredit(self) -> int:
        """Ask the server for as many steps as there are free runners, plus LOOKAHEAD,
        minus the steps in hand that no runner is reserved for yet. Returns the free count."""
        free = len(self.pool.free())
        # A free runner with no step in hand for it is served at once; the lookahead
        # alone is refilled half at a time, so a saturated pool asks once per few steps.
        for opening, pull in self._pulls.items():
            unplaced = self._unplaced[opening]
            at_least = 1 if free > unplaced else LOOKAHEAD // 2
            pull.set_credit(max(free + LOOKAHEAD - unplaced, 0), at_least)
        return free

    # ---- dispatching ----

    async def _on_ready(self, msg: Msg) -> Outcome:
        if self._stopping:
            return Outcome.RETURNED  # to another dispatcher at once
        self._count_unplaced(msg, 1)
        self._recredit()  # before the pull tops itself up after this message
        task = asyncio.create_task(self._assign(msg))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return Outcome.HELD  # settled by _assign once a runner accepted it

    def _count_unplaced(self, msg: Msg, by: int) -> None:
        self._unplaced[names.ready_opens(msg.subject)] += by

    async def _assign(self, msg: Msg) -> None:
        try:
            ready = step_ready_decoder.decode(msg.data)
        except msgspec.DecodeError as exc:
            self._count_unplaced(msg, -1)
            log.error("dropping undecodable ready message %s: %s", msg.subject, exc)
            await settle(msg, Outcome.REFUSED)
            return
        # Redelivered because a dispatcher died between a runner's acceptance and its
        # acknowledgement, or sent again by a broker that lost its consumer's state, or
        # offered to a runner whose answer never came back: a runner may have it already.
        key = (ready.run_id, ready.step_id, ready.attempt, ready.requeue)
        if key in self._hand:
            # Another copy is being offered right now; this one is left unacknowledged and
            # comes back, if ever, once that one is placed (and then is checked).
            self._count_unplaced(msg, -1)
            return
        check = self._hand.take(key, time.monotonic()) or redelivered(msg) or ready.check
        try:
            await self._place(msg, ready, check)
        finally:
            self._hand.drop(key, time.monotonic())

    async def _place(self, msg: Msg, ready: StepReady, check: bool) -> None:
        """Offer the step to free runners until one accepts it; settle it without one if a
        runner has it already (``check``: looked for first) or this dispatcher stops."""
        offered = False
        key = (ready.run_id, ready.step_id, ready.attempt, ready.requeue)
        while True:
            if check:
                check = False
                if await already_taken(self.js, self.runs_kv, ready):
                    await self._unplace(msg, ready, Outcome.DONE, "already taken")
                    return
            name = await self._reserve(msg, key, opening=names.ready_opens(msg.subject))
            if name is None:
                # Back to the stream at once, for another dispatcher (a rolling update), or
                # for this one's successor.
                await self._unplace(msg, ready, Outcome.RETURNED, "given back")
                return
            if why := self._held_past(key):
                # The server may have given it to another dispatcher, which may be offering
                # it now: it comes back, if it is still anyone's, after its ack wait.
                self.pool.unreserve(name)
                await self._wake()
                await self._unplace(msg, ready, Outcome.LEFT, f"left: {why}")
                return
            self._count_unplaced(msg, -1)
            if offered:  # a full ack wait for this offer too
                await settle(msg, Outcome.WAITING)
                self._hand.touch(key, time.monotonic())
            offered = True
            answer = await self._offer(msg, ready, name)
            if answer is Answer.ACCEPTED:
                return
            self._count_unplaced(msg, 1)
            # Unanswered, the request may have arrived and only the answer been lost.
            check = answer is Answer.UNANSWERED

    def _held_past(self, key: AttemptKey) -> str | None:
        """Why a ready message in hand may no longer be this dispatcher's to offer: held
        near its ack wait since it was last touched, or handled just after this process
        stood still; None if it is."""
        if stall := self.stalls.stall_before_now():
            return f"this dispatcher stood still for {stall:.1f}s"
        held = self._hand.held_since_touch(key, time.monotonic())
        if held >= ack_wait(self.settings) * HELD_LIMIT:
            return f"held {held:.1f}s since it was last touched"
        return None

    async def _reserve(self, msg: Msg, key: AttemptKey, opening: bool) -> str | None:
        """A free runner, reserved for this message, once there is one and (for a step that
        opens a run) no step of a run under way waits for it; None if this dispatcher stops
        first. The message is touched while it waits, so it is not lost."""
        touch_every = ack_wait(self.settings) / 3
        # Timed from the last touch, not from the last wake: a pool that turns over often
        # wakes a waiter often, and the message must still be touched.
        touch_at = time.monotonic() + touch_every
        woken = False
        while (name := self._free_runner(opening)) is None:
            if self._stopping:
                return None
            if (left := touch_at - time.monotonic()) <= 0:
                await settle(msg, Outcome.WAITING)  # waiting for a runner, not lost
                now = time.monotonic()
                self._hand.touch(key, now)
                touch_at = now + touch_every
                continue
            # Woken and beaten to the runner: the front of the line again.
            woken = await self._line.wait(left, front=woken, opening=opening)
        return name

    def _free_runner(self, opening: bool) -> str | None:
        """A free runner reserved, unless the step opens a run and a step of a run under
        way waits: then the free runners wake those."""
        if opening and self._line.under_way:
            self._line.wake(len(self.pool.free()))
            return None
        return self.pool.reserve()

    async def _offer(self, msg: Msg, ready: StepReady, name: str) -> Answer:
        """Offer the step to the reserved runner ``name``; on acceptance, lease it and
        settle the message."""
        offered = await offer(self.nc, name, msg.data, self.settings.assign_timeout)
        match offered:
            case Offered(answer=Answer.UNREACHED | Answer.UNANSWERED, error=error):
                self._said("runner did not answer", ready, runner=name, error=error)
                self.pool.refused(name, silent=True)
            case Offered(answer=Answer.REFUSED):
                self.pool.refused(name, silent=False)
            case Offered(answer=Answer.ACCEPTED, reply=AssignReply(jobs=jobs)):
                self.pool.accepted(name, ready.run_id, ready.step_id, ready.attempt, jobs)
                await self._wake()
                await settle(msg, Outcome.DONE)
                self._said("assigned", ready, runner=name, attempt=ready.attempt)
        return offered.answer

    async def _unplace(self, msg: Msg, ready: StepReady, outcome: Outcome, what: str) -> None:
        """Settle a ready message in hand that no runner will be given here."""
        self._count_unplaced(msg, -1)
        self._said(what, ready, attempt=ready.attempt)
        await settle(msg, outcome)

    def _said(self, what: str, ready: StepReady, **fields: object) -> None:
        """An event about a ready step in this dispatcher's hand."""
        event(log, what, dispatcher=self.instance, run=ready.run_id, step=ready.step_id, **fields)


def _or_first(ordinal: int | None) -> int:
    return -1 if ordinal is None else ordinal
