"""Placing a ready message: from its arrival in a dispatcher's hand to its settling, offered
to free runners until one accepts it.

A runner is reserved for it once one is free and (for a step that opens a run) no step of a
run under way waits; it is touched while it waits, so it is not lost; it is looked for first
where a runner may have it already (``check``); and it is given back when the dispatcher
stops, or left when it may be another dispatcher's by now (held near its ack wait, or handled
just after this process stood still). Its own module: one message's way to a runner, apart
from the dispatcher around it (app.py: the connection, the pulls and their credit, the pool's
feed, autoscaling, shutdown).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec
from heddle.services.dispatcher.checks import already_taken
from heddle.services.dispatcher.hand import AttemptKey, Hand
from heddle.services.dispatcher.pool import Pool
from heddle.services.dispatcher.ready import HELD_LIMIT, ack_wait
from heddle.services.dispatcher.unanswered import Unanswered
from heddle.services.dispatcher.waiting import Competes, Turn, WaitingLine, fits
from heddle.shared.broker.consume import Outcome, redelivered, settle
from heddle.shared.broker.offers import Answer, OfferDesk, Offered
from heddle.shared.core.namespaces import namespace_of
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.runtime.stalls import LoopStalls
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AssignReply, StepReady, step_ready_decoder

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import JetStreamContext, KeyValue, Msg

log = logging.getLogger("heddle.dispatcher")
# Where a ready message waits in hand: the label key it asks for, and whether it opens a run.
Lane = tuple[str, bool]


def lane_of(subject: str) -> Lane:
    return names.ready_key(subject), names.ready_opens(subject)


class Placing:
    """The ready messages in a dispatcher's hand, each on its way to a runner."""

    def __init__(
        self,
        settings: Settings,
        instance: str,
        pool: Pool,
        line: WaitingLine,
        hand: Hand,
        stalls: LoopStalls,
        recredit: Callable[[], object],
        wake: Callable[[], Awaitable[None]],
    ) -> None:
        self.settings = settings
        self.instance = instance
        self.pool = pool
        self._line = line
        self._hand = hand
        self.stalls = stalls
        self._recredit = recredit  # the pulls' credit set again (app.py)
        self._wake = wake  # a runner taken or given back: the waiters and the pulls told
        # Ready messages in hand that no runner is reserved for, by lane: the label key they
        # ask for ("" the default pool) and whether they open a run.
        self.unplaced: dict[Lane, int] = {("", False): 0, ("", True): 0}
        self.inflight: set[asyncio.Task] = set()
        self._arrivals = itertools.count()  # the order the messages came in
        self.lanes: dict[AttemptKey, Lane] = {}  # the lane of each message in hand
        self.stopping = False  # new messages go back at once, waiting ones are given back
        self._desk: OfferDesk | None = None  # from connect
        self._js: JetStreamContext | None = None
        self._runs_kv: KeyValue | None = None

    def connect(self, desk: OfferDesk, js: JetStreamContext, runs_kv: KeyValue) -> None:
        """Where offers go out and their answers come back, and what a check reads."""
        self._desk, self._js, self._runs_kv = desk, js, runs_kv

    @property
    def desk(self) -> OfferDesk:
        """The offers' desk, on the connection made by the dispatcher's ``start``."""
        if self._desk is None:
            raise RuntimeError("the dispatcher is not started")
        return self._desk

    async def on_ready(self, msg: Msg) -> Outcome:
        if self.stopping:
            return Outcome.RETURNED  # to another dispatcher at once
        lane = lane_of(msg.subject)
        self._count_unplaced(lane, 1)
        self._recredit()  # before the pull tops itself up after this message
        task = asyncio.create_task(self._assign(msg, lane))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)
        return Outcome.HELD  # settled by _assign once a runner accepted it

    def _count_unplaced(self, lane: Lane, by: int) -> None:
        self.unplaced[lane] = self.unplaced.get(lane, 0) + by

    async def _assign(self, msg: Msg, lane: Lane) -> None:
        try:
            ready = step_ready_decoder.decode(msg.data)
        except msgspec.DecodeError as exc:
            self._count_unplaced(lane, -1)
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
            self._count_unplaced(lane, -1)
            return
        check = self._hand.take(key, time.monotonic()) or redelivered(msg) or ready.check
        self.lanes[key] = lane
        try:
            await self._place(msg, ready, check, lane)
        finally:
            self._hand.drop(key, time.monotonic())
            self.lanes.pop(key, None)

    async def _place(self, msg: Msg, ready: StepReady, check: bool, lane: Lane) -> None:
        """Offer the step to free runners until one accepts it; settle it without one if a
        runner has it already (``check``: looked for first) or this dispatcher stops. A
        runner that gave no answer may hold the attempt: it is asked again before any
        other (unanswered.py), as is the one an unanswered handoff went to (``held_by``)."""
        offered = False
        key = (ready.run_id, ready.step_id, ready.attempt, ready.requeue)
        silent = Unanswered(ready.held_by, time.monotonic())
        while True:
            if check:
                check = False
                assert self._js is not None and self._runs_kv is not None  # connected first
                if await already_taken(self._js, self._runs_kv, ready):
                    await self._unplace(msg, ready, lane, Outcome.DONE, "already taken")
                    return
            name = self._ask_again(silent) or await self._reserve(msg, key, lane, ready)
            if isinstance(name, Outcome):
                # DONE: failed meanwhile for want of a runner (no_runner.py). RETURNED: back
                # to the stream at once, for another dispatcher (a rolling update), or for
                # this one's successor.
                what = "ended while it waited" if name is Outcome.DONE else "given back"
                await self._unplace(msg, ready, lane, name, what)
                return
            if why := self._held_past(key):
                # The server may have given it to another dispatcher, which may be offering
                # it now: it comes back, if it is still anyone's, after its ack wait.
                self.pool.unreserve(name)
                await self._wake()
                await self._unplace(msg, ready, lane, Outcome.LEFT, f"left: {why}")
                return
            self._count_unplaced(lane, -1)
            if offered:  # a full ack wait for this offer too
                await settle(msg, Outcome.WAITING)
                self._hand.touch(key, time.monotonic())
            offered, offered_at = True, time.monotonic()
            answer = await self._offer(msg, ready, name)
            if answer is Answer.ACCEPTED:
                return
            self._count_unplaced(lane, 1)
            # Unanswered, the request may have arrived and only the answer been lost.
            check = answer is Answer.UNANSWERED
            if check:
                silent.went(name, offered_at)
            else:
                silent.clear()

    def _ask_again(self, silent: Unanswered) -> str:
        """The runner that gave no answer, reserved for this message again while it may
        hold the attempt and is in the pool; "" when the attempt may go to any runner.
        Asked while this dispatcher stops too: given back, the step would be offered to
        another runner at once, and run twice once this one moves again."""
        name = silent.ask_again(time.monotonic(), self.settings.silence_limit)
        if name and not self.pool.reserve_again(name):
            silent.clear()  # it left the pool: its registry entry expired, or it stopped
            return ""
        return name

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

    async def _reserve(
        self, msg: Msg, key: AttemptKey, lane: Lane, ready: StepReady
    ) -> str | Outcome:
        """A free runner, reserved for this message, once there is one and no step waiting
        for one goes before it (waiting.py: priority, then fair turns between runs);
        RETURNED if this dispatcher stops first, DONE if the step ended meanwhile while no
        runner could take it. The message is touched while it waits, so it is not lost."""
        touch_every = ack_wait(self.settings) / 3
        # Timed from the last touch, not from the last wake: a pool that turns over often
        # wakes a waiter often, and the message must still be touched.
        touch_at = time.monotonic() + touch_every
        woken = False
        labels, opening = lane
        turn = Turn(ready.run_id, ready.priority, opening, next(self._arrivals))
        while (name := self._free_runner(labels, turn, woken)) is None:
            if self.stopping:
                return Outcome.RETURNED
            if (left := touch_at - time.monotonic()) <= 0:
                if await self._ended_unplaceable(labels, ready):
                    return Outcome.DONE
                await settle(msg, Outcome.WAITING)  # waiting for a runner, not lost
                now = time.monotonic()
                self._hand.touch(key, now)
                touch_at = now + touch_every
                continue
            # Woken and beaten to the runner: in line again, keeping its arrival.
            woken = await self._line.wait(left, turn, key=labels)
        return name

    def _free_runner(self, labels: str, turn: Turn, woken: bool) -> str | None:
        """A free runner of the label key ``labels`` (that takes the step's namespace)
        reserved, unless this step has just come and a step waiting for one goes before
        it: then the free runners wake those. A step woken was chosen in turn, and takes
        one if there is one."""
        namespace = namespace_of(turn.run_id) if self.pool.namespaces else None
        if (
            not woken
            and self.pool.any_free(labels, namespace=namespace)
            and self._line.ahead(labels, turn, self._competes(labels, namespace))
        ):
            self._line.wake({labels: len(self.pool.free(key=labels))})
            return None
        return self.pool.reserve(key=labels, namespace=namespace)

    def _competes(self, labels: str, namespace: str | None) -> Competes | None:
        """Whether a waiter may use one of the free runners a step of ``namespace`` may:
        only such a waiter goes before it (None: every one, no runner being restricted)."""
        if namespace is None:
            return None
        mine = [
            self.pool.namespaces.get(n) for n in self.pool.free(key=labels, namespace=namespace)
        ]
        return lambda turn: any(fits(turn, served) for served in mine)

    async def _ended_unplaceable(self, labels: str, ready: StepReady) -> bool:
        """Whether a step in hand that no registered runner may take, for its namespace,
        has ended meanwhile: the orchestrator fails it after HEDDLE_NO_RUNNER_TIMEOUT, and
        it must not go to a runner that registers later."""
        if not self.pool.namespaces or self.pool.serves_any(labels, namespace_of(ready.run_id)):
            return False
        assert self._js is not None and self._runs_kv is not None  # connected first
        return await already_taken(self._js, self._runs_kv, ready)

    async def _offer(self, msg: Msg, ready: StepReady, name: str) -> Answer:
        """Offer the step to the reserved runner ``name``; on acceptance, lease it and
        settle the message."""
        attempt = (ready.run_id, ready.step_id, ready.attempt, ready.ticket)
        offered = await self.desk.offer(name, msg.data, attempt, self.settings.assign_timeout)
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

    async def _unplace(
        self, msg: Msg, ready: StepReady, lane: Lane, outcome: Outcome, what: str
    ) -> None:
        """Settle a ready message in hand that no runner will be given here."""
        self._count_unplaced(lane, -1)
        self._said(what, ready, attempt=ready.attempt)
        await settle(msg, outcome)

    def _said(self, what: str, ready: StepReady, **fields: object) -> None:
        """An event about a ready step in this dispatcher's hand."""
        event(log, what, dispatcher=self.instance, run=ready.run_id, step=ready.step_id, **fields)
