"""The runner agent: runs one step at a time and reports what it sees.

It accepts an assignment on its own subject (``attempt.py`` carries out each accepted one:
the command, its heartbeats, its output, its outcome), answers kill
requests for the attempt it runs, and keeps its entry in heddle-runners
(``registration.py``), so a runner that dies leaves the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
from typing import TYPE_CHECKING

import msgspec
from heddle.services.runner_agent.attempt import Attempt
from heddle.services.runner_agent.attempt_context import AttemptContext
from heddle.services.runner_agent.continuations import AttemptKey, Continuations
from heddle.services.runner_agent.isolation import (
    StepUser,
    make_undumpable,
    step_base_env,
    take_step_user,
)
from heddle.services.runner_agent.launcher import Launcher
from heddle.services.runner_agent.registration import Registration
from heddle.services.runner_agent.taken import Taken
from heddle.shared.broker.acked import NOT_STORED, AckedPublisher
from heddle.shared.broker.nats_io import close, connect_until_ready
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.core import tickets
from heddle.shared.runtime import failpoints
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.runtime.stalls import LoopStalls
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    AssignReply,
    CancelAttempt,
    RunnerInfo,
    StepReady,
    cancel_attempt_decoder,
    encode,
    step_ready_decoder,
)
from heddle.shared.wire.timefmt import now_rfc3339

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client, Msg

log = logging.getLogger("heddle.runner")
VERSION = "0.1.0"


def runner_name(settings: Settings) -> str:
    return settings.runner_name or settings.pod_name or f"{socket.gethostname()}-{os.getpid()}"


class RunnerAgent:
    name = "runner"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runner = runner_name(settings)
        if not names.ID_PATTERN.match(self.runner):
            raise ValueError(f"runner name {self.runner!r} must match {names.ID_PATTERN.pattern}")
        self.current: Attempt | None = None
        self.jobs = 0
        self.started_at = now_rfc3339()
        self._subs: list = []
        self._stopping = False
        self.nc: Client | None = None
        self.registration: Registration | None = None
        self._ctx: AttemptContext | None = None
        self.run_as: StepUser | None = None
        self.launcher: Launcher | None = None
        # Half the assignment timeout: one accepted before it is answered within a quarter
        # of the timeout more (first_report.py), so in time.
        self.stalls = LoopStalls(settings.assign_timeout / 2)
        self.taken = Taken()  # the attempts taken last: one offered again is not run again
        self.continuations = Continuations()  # those that came before their attempt's offer
        self._cancel_ignored: AttemptKey | None = None  # the attempt it last said so of

    # ---- lifecycle ----

    async def start(self) -> None:
        settings = self.settings
        if not make_undumpable():
            log.warning("could not make the runner non-dumpable: steps may read its memory")
        step_user = self.run_as = take_step_user(settings)  # its uid held, where its own
        if step_user is not None:
            self.launcher = Launcher(step_user.uid, step_user.gid, sweep=step_user.own)
            self.launcher.start()  # a runner that cannot run steps does not start
        event(
            log,
            "steps run as",
            runner=self.runner,
            user=f"{step_user.name} (uid {step_user.uid})" if step_user else "the runner itself",
        )
        self.nc = await connect_until_ready(
            settings,
            f"heddle-runner-{self.runner}",
            on_reconnect=self._reconnected,
            on_disconnect=self._disconnected,
        )
        res = await ensure_resources(
            self.nc,
            settings,
            streams=(names.EVENTS_STREAM, names.LOGS_STREAM),
            buckets=(names.HEARTBEATS_BUCKET, names.RUNNERS_BUCKET),
            create=False,
        )
        self.js = res.js
        self._ctx = AttemptContext(
            runner=self.runner,
            nc=self.nc,
            js=self.js,
            acked=await AckedPublisher(self.nc).start(),
            settings=settings,
            base_env=step_base_env(dict(os.environ)),
            heartbeat_ttl=max(10, math.ceil(settings.silence_limit * 2)),
            run_as=self.run_as,
            launcher=self.launcher,
        )
        self.registration = Registration(
            self.nc,
            self.js,
            self.runner,
            settings.registry_ttl,
            settings.registry_interval,
            self._info,
        )
        self.stalls.start()
        self._subs = [
            await self.nc.subscribe(names.runner_assign(self.runner), cb=self._on_assign),
            await self.nc.subscribe(names.runner_cancel(self.runner), cb=self._on_cancel),
        ]
        await self.nc.flush()
        await self.registration.write()
        self.registration.start_refreshing()
        event(log, "runner ready", runner=self.runner)

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True  # refuse new assignments from here on
        current = self.current
        if current is not None and current.task is not None:
            try:
                await asyncio.wait_for(
                    asyncio.shield(current.done.wait()), self.settings.shutdown_grace
                )
            except TimeoutError:
                current.kill("cancelled", f"runner {self.runner} shut down")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(current.done.wait(), self.settings.kill_grace + 5)
        if self.registration is not None:
            await self.registration.stop(remove=bool(self.nc and not self.nc.is_closed))
        if self.launcher is not None:
            self.launcher.close()
        self.stalls.stop()
        await close(self.nc)

    async def _disconnected(self) -> None:
        if self._ctx is not None:
            self._ctx.acked.lost()

    async def _reconnected(self) -> None:
        if self.registration is not None:
            with contextlib.suppress(Exception):
                await self.registration.write()

    def _info(self) -> RunnerInfo:
        cur = self.current
        return RunnerInfo(
            name=self.runner,
            status="busy" if cur else "idle",
            pid=os.getpid(),
            version=VERSION,
            started_at=self.started_at,
            seen_at=now_rfc3339(),
            pod=self.settings.pod_name or None,
            node=self.settings.node_name or None,
            run_id=cur.ready.run_id if cur else None,
            step_id=cur.ready.step_id if cur else None,
            attempt=cur.ready.attempt if cur else None,
            jobs=self.jobs,
        )

    # ---- assignments ----

    async def _refuse(self, msg: Msg, reason: str) -> None:
        await msg.respond(
            encode(AssignReply(accepted=False, runner=self.runner, reason=reason, jobs=self.jobs))
        )

    async def _on_assign(self, msg: Msg) -> None:
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
        if self._stopping or self.current is not None:
            await self._refuse(msg, "shutting down" if self._stopping else "busy")
            return
        if stall := self.stalls.stall_before_now():
            # It may have waited through the stall, and its offer been given up
            # (shared/runtime/stalls.py).
            reason = f"stale: this runner stood still for {stall:.1f}s"
            self._said("refused", ready, reason=reason)
            await self._refuse(msg, reason)
            return
        assert self._ctx is not None  # set in start(), before the subscription
        attempt = self.current = Attempt(self._ctx, ready)
        attempt.then = self.continuations.of(attempt)
        self.jobs += 1
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
            assert self.nc is not None  # connected in start(), before the subscription
            await msg.respond(accepted)
            answer = None
            await self.nc.flush()  # the acceptance reaches the dispatcher, then we die
            failpoints.hit("runner.after_accept")
        if failpoints.active("runner.answer_lost"):  # as if lost with a broker
            answer = None
        # The answer leaves with the step's first report: its outcome, or its start once
        # it has run for a moment (first_report.py).
        await attempt.start(answer=answer)
        attempt.task = asyncio.create_task(self._run(attempt))
        self._registration_soon()

    async def _go_on(self, done: Attempt, ready: StepReady) -> str:
        """Start ``ready``, the continuation of ``done``, which just succeeded without
        outputs, and name its step; "" if this runner does not (stopping, or it stood
        still)."""
        if self._stopping or self.stalls.stall_before_now():
            return ""
        assert self._ctx is not None
        attempt = Attempt(self._ctx, ready, after=done)
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
        self._registration_soon()

    def _registration_soon(self) -> None:
        """The registry entry rewritten soon (busy or idle); made in start()."""
        if self.registration is not None:
            self.registration.soon()

    def _free(self, attempt: Attempt) -> None:
        if self.current is attempt:  # not its continuation, which holds the runner now
            self.current = None

    async def _on_cancel(self, msg: Msg) -> None:
        try:
            req = cancel_attempt_decoder.decode(msg.data)
        except msgspec.DecodeError:
            return
        cur = self.current
        key = (req.run_id, req.step_id, req.attempt)
        # A continuation dies with the attempt it follows: its runner went on before the
        # kill of that one arrived.
        if cur is None or key not in (cur.key, cur.after_key):
            return
        # The attempt's ticket shows the orchestrator sent it: any user's JetStream request
        # can have its reply (or a push consumer its messages) delivered to this subject.
        ticket = cur.ready.ticket if key == cur.key else cur.ready.after_ticket
        if not tickets.holds(ticket, req.ticket):
            if self._cancel_ignored != key:  # once per attempt: a flood is not a flood of lines
                self._cancel_ignored = key
                self._cancel_said("cancel ignored", req, "its ticket is not the attempt's")
            return
        self._cancel_said("kill requested", req, req.reason)
        if cur.process is not None:
            await cur.process.started.wait()
            cur.kill("cancelled", req.reason)

    def _cancel_said(self, what: str, req: CancelAttempt, reason: str) -> None:
        event(
            log,
            what,
            runner=self.runner,
            run=req.run_id,
            step=req.step_id,
            attempt=req.attempt,
            reason=reason,
        )
