"""The assignments a runner takes, one at a time: an offer accepted, refused or answered
again, a continuation started the moment the attempt before it succeeds (docs/latency.md,
"Continuing a chain"), and the runner free again once an attempt's log is complete.

Its own module: what the runner does with an offer is apart from the process around it
(app.py: the connection, the registry entry, shutdown) and from kill requests
(kill_requests.py); each accepted attempt is carried out by attempt.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
from heddle.services.runner_agent.attempt import Attempt
from heddle.services.runner_agent.continuations import Continuations
from heddle.services.runner_agent.taken import Taken
from heddle.shared.broker.acked import NOT_STORED
from heddle.shared.core.labels import parse_labels, runner_labels, takes
from heddle.shared.core.pool_namespaces import parse_namespaces, serves
from heddle.shared.runtime import failpoints
from heddle.shared.runtime.service import event
from heddle.shared.wire.contracts import AssignReply, StepReady, encode, step_ready_decoder

if TYPE_CHECKING:
    from heddle.services.runner_agent.attempt_context import AttemptContext
    from heddle.shared.broker.nats_types import Msg
    from heddle.shared.runtime.settings import Settings
    from heddle.shared.runtime.stalls import LoopStalls

log = logging.getLogger("heddle.runner")


class Assignments:
    """The attempt this runner holds (``current``), and those it took last."""

    def __init__(
        self,
        settings: Settings,
        runner: str,
        stalls: LoopStalls,
        changed: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.runner = runner
        self.stalls = stalls
        self._changed = changed  # the registry entry to be rewritten soon (busy or idle)
        self.ctx: AttemptContext | None = None  # set once connected, before the subscription
        self.current: Attempt | None = None
        self.jobs = 0
        self.stopping = False  # new assignments refused from then on
        self.taken = Taken()  # the attempts taken last: one offered again is not run again
        self.continuations = Continuations()  # those that came before their attempt's offer
        self.pool = settings.runner_pool
        self.labels = runner_labels(self.pool, parse_labels(settings.runner_labels))
        self.namespaces = sorted(parse_namespaces(settings.pool_namespaces))  # none: all

    async def _refuse(self, msg: Msg, reason: str) -> None:
        await msg.respond(
            encode(AssignReply(accepted=False, runner=self.runner, reason=reason, jobs=self.jobs))
        )

    async def on_assign(self, msg: Msg) -> None:
        try:
            ready = step_ready_decoder.decode(msg.data)
        except msgspec.DecodeError as exc:  # its ValidationError too
            await self._refuse(msg, f"undecodable assignment: {exc}")
            return
        if ready.after:  # a continuation (docs/latency.md, "Continuing a chain")
            self.continuations.hold(ready, self.current)
            return
        if (ready.run_id, ready.step_id, ready.attempt, ready.ticket) in self.taken:
            await self._accept_again(msg, ready)
            return
        if self.stopping or self.current is not None:
            await self._refuse(msg, "shutting down" if self.stopping else "busy")
            return
        if not takes(self.pool, self.labels, ready.runs_on):
            # Handed here directly by an orchestrator that did not know this runner's labels.
            await self._refuse(msg, f"not for this runner's labels: {', '.join(self.labels)}")
            return
        if not serves(self.namespaces, ready.run_id):
            await self._refuse(
                msg, f"not for this runner's namespaces: {', '.join(self.namespaces)}"
            )
            return
        if stall := self.stalls.stall_before_now():
            # It may have waited through the stall, and its offer been given up
            # (shared/runtime/stalls.py).
            reason = f"stale: this runner stood still for {stall:.1f}s"
            self._said("refused", ready, reason=reason)
            await self._refuse(msg, reason)
            return
        ctx = self.ctx
        assert ctx is not None  # set in start(), before the subscription
        attempt = self.current = Attempt(ctx, ready)
        attempt.then = self.continuations.of(attempt)
        self.jobs += 1
        attempt.jobs = self.jobs
        if self.settings.started_report_delay == 0 or failpoints.active("runner.after_accept"):
            # Every start reported at once: the attempt is made known before its command
            # starts, so a runner that dies at any point leaves a trace (docs/latency.md).
            try:
                await attempt.beats.beat()
            except NOT_STORED as exc:
                self.current = None
                await self._refuse(msg, f"heartbeat failed: {exc}")
                return
        self.taken.add((ready.run_id, ready.step_id, ready.attempt, ready.ticket))
        accepted = self._accepted()
        answer: tuple[Msg, bytes] | None = (msg, accepted)
        self._said("accepted", ready)
        if failpoints.active("runner.after_accept"):
            await msg.respond(accepted)
            answer = None
            await ctx.nc.flush()  # the acceptance reaches the dispatcher, then we die
            failpoints.hit("runner.after_accept")
        if failpoints.active("runner.answer_lost"):  # as if lost with a broker
            answer = None
        # The answer leaves with the step's first report: its outcome, or its start once
        # it has run for a moment (first_report.py).
        await attempt.start(answer=answer)
        attempt.task = asyncio.create_task(self._run(attempt))
        self._changed()

    async def _go_on(self, done: Attempt, ready: StepReady) -> str:
        """Start ``ready``, the continuation of ``done``, which just succeeded without
        outputs, and name its step; "" if this runner does not (stopping, or it stood
        still)."""
        if self.stopping or self.stalls.stall_before_now():
            return ""
        if not takes(self.pool, self.labels, ready.runs_on) or not serves(
            self.namespaces, ready.run_id
        ):
            return ""
        assert self.ctx is not None
        attempt = Attempt(self.ctx, ready, after=done)
        if self.settings.started_report_delay == 0:
            # Every start made known before its command starts, continuations included.
            try:
                await attempt.beats.beat()
            except NOT_STORED as exc:
                log.warning("continuation %s not started: heartbeat failed: %s", ready.step_id, exc)
                return ""
        self.current = attempt
        attempt.then = self.continuations.of(attempt)
        self.jobs += 1
        attempt.jobs = self.jobs
        self.taken.add((*attempt.key, ready.ticket))
        self._said("continued", ready, after=done.ready.step_id)
        await attempt.start()
        attempt.task = asyncio.create_task(self._run(attempt))
        return ready.step_id

    def _accepted(self) -> bytes:
        return encode(AssignReply(accepted=True, runner=self.runner, jobs=self.jobs))

    async def _accept_again(self, msg: Msg, ready: StepReady) -> None:
        """An attempt this runner took offered again: it holds it or ran it (taken.py)."""
        self._said("accepted again", ready)
        current = self.current
        if current is not None and current.same(ready.run_id, ready.step_id, ready.attempt):
            await current.first_report.answer_too(msg, self._accepted())
        else:
            await msg.respond(self._accepted())

    def _said(self, what: str, ready: StepReady, **fields: object) -> None:
        """An event about an assignment."""
        event(
            log,
            what,
            runner=self.runner,
            run=ready.run_id,
            step=ready.step_id,
            attempt=ready.attempt,
            **fields,
        )

    async def _run(self, attempt: Attempt) -> None:
        try:
            await attempt.run(free=lambda: self._free(attempt), go_on=self._go_on)
        except Exception:  # freed and silent (Attempt.run): the watchdog ends the attempt
            r = attempt.ready
            log.exception("step %s/%s attempt %d not reported", r.run_id, r.step_id, r.attempt)
        failpoints.hit("runner.after_report")
        self._changed()

    def _free(self, attempt: Attempt) -> None:
        if self.current is attempt:  # not its continuation, which holds the runner now
            self.current = None
