"""Handing a step to the runner that just freed up (``Enqueue.handoff``).

When a success readies a step, the orchestrator offers it to the runner that succeeded, as a
dispatcher would (an offer on the runner's assignment subject, answered "accepted" with the
attempt's first report, or by the attempt's outcome: ``OfferDesk``), instead of publishing
its ready message for the dispatchers: one hop instead of a stream write, a delivery and a
dispatcher's request. The offer goes out once, right after the step's queued record (which
names the runner, ``offered_to``), without waiting for its acknowledgement.
The answer goes to the run's actor (``RunState.on_handoff_answer``): refused, the step goes to
the dispatchers; unanswered, it goes to them marked to be looked for first. After a restart,
an offer whose answer was lost is taken as unanswered once a runner would have answered
(``AwaitHandoff``). Why and what it costs: docs/latency.md, "Handing off".
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from heddle.services.orchestrator.decisions import AwaitHandoff, Continue, Effect, Enqueue
from heddle.services.orchestrator.messages import HandedOff, Mailboxes
from heddle.services.orchestrator.state import HandoffAnswer
from heddle.shared.broker.nats_types import NatsError
from heddle.shared.broker.offers import Answer, OfferDesk
from heddle.shared.runtime.metrics import CONTINUATIONS, HANDOFFS, child
from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import encode

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client

log = logging.getLogger("heddle.orchestrator")
# Not reached, an offer never arrived: the dispatchers place the step as if refused.
ANSWERS: dict[Answer, HandoffAnswer] = {
    Answer.ACCEPTED: "accepted",
    Answer.REFUSED: "refused",
    Answer.UNREACHED: "refused",
    Answer.UNANSWERED: "unanswered",
}


class Handoffs:
    def __init__(self, nc: Client, desk: OfferDesk, answer_within: float, runs: Mailboxes) -> None:
        self.nc = nc  # continuations, which are not answered
        self.desk = desk  # offers, answered by a reply or by the attempt's outcome
        self.answer_within = answer_within  # HEDDLE_ASSIGN_TIMEOUT, as a dispatcher waits
        self.runs = runs  # each answer goes to its run's actor, if the run is live here
        self._offers: set[asyncio.Task] = set()
        self._timers: set[asyncio.TimerHandle] = set()

    def offer(self, run_id: str, effects: list[Effect]) -> None:
        """The offers and continuations among a batch's effects, sent right after their
        records (effect_writes.py)."""
        for eff in effects:
            if isinstance(eff, Enqueue) and eff.handoff is not None:
                self._track(asyncio.create_task(self._offer(run_id, eff, eff.handoff)))
            elif isinstance(eff, Continue):
                self._track(asyncio.create_task(self._continue(run_id, eff)))

    def _track(self, task: asyncio.Task) -> None:
        self._offers.add(task)
        task.add_done_callback(self._offers.discard)

    def await_lost(self, run_id: str, effects: list[Effect]) -> None:
        """The answers lost with an earlier orchestrator among a stored batch's effects."""
        for eff in effects:
            if isinstance(eff, AwaitHandoff):
                self._later(run_id, eff.step_id, eff.attempt, eff.requeue, eff.runner)

    def _later(self, run_id: str, step: str, attempt: int, requeue: int, runner: str) -> None:
        def fire() -> None:
            self._timers.discard(handle)
            self.runs.post(run_id, HandedOff(step, attempt, requeue, runner, "unanswered"))

        handle = asyncio.get_running_loop().call_later(self.answer_within, fire)
        self._timers.add(handle)

    async def _offer(self, run_id: str, eff: Enqueue, runner: str) -> None:
        ready = eff.ready
        attempt = (run_id, ready.step_id, ready.attempt, ready.ticket)
        offered = await self.desk.offer(runner, encode(ready), attempt, self.answer_within)
        answer = ANSWERS[offered.answer]
        child(HANDOFFS, answer).inc()
        event(
            log,
            "handed off" if answer == "accepted" else f"handoff {answer}",
            run=run_id,
            step=ready.step_id,
            attempt=ready.attempt,
            runner=runner,
        )
        self.runs.post(
            run_id, HandedOff(ready.step_id, ready.attempt, ready.requeue, runner, answer)
        )

    async def _continue(self, run_id: str, eff: Continue) -> None:
        """A plain publish: the runner answers nothing. Its outcome of the attempt this
        follows says whether it started the continuation (docs/latency.md)."""
        ready = eff.ready
        try:
            await self.nc.publish(names.runner_assign(eff.runner), encode(ready))
        except NatsError as exc:  # not sent: the step is handed off when its parent ends
            log.warning("continuation %s/%s not sent: %s", run_id, ready.step_id, exc)
            return
        child(CONTINUATIONS, "sent").inc()
        event(
            log,
            "continuation sent",
            run=run_id,
            step=ready.step_id,
            after=ready.after,
            runner=eff.runner,
        )

    async def stop(self) -> None:
        """Offers under way are given up: their steps are queued with ``offered_to`` stored,
        so whoever rebuilds the run waits for the answer as if lost."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        for task in list(self._offers):
            task.cancel()
        if self._offers:
            await asyncio.gather(*self._offers, return_exceptions=True)
