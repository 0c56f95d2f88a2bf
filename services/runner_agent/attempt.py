"""One accepted assignment, from its command's start to its reported outcome.

An attempt spawns the command, heartbeats while it runs (heartbeats.py: from its first
report or answer on, so a short step writes none), streams its output, and publishes the
outcome until it lands.

A command still running ``HEDDLE_STARTED_REPORT_DELAY`` after it started is announced: the
log's first note ("started on runner X (pid N)") and the started event, which moves the step
to running. One that ends sooner is reported once, by its outcome, which carries the same
start time and pid. The runner's answer to the dispatcher goes in the same write as the
first report, and at the latest after a quarter of the dispatcher's wait: a short step
costs its runner one write in all (docs/latency.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from heddle.services.runner_agent.continuations import AttemptKey
from heddle.services.runner_agent.heartbeats import Heartbeats
from heddle.services.runner_agent.isolation import StepUser
from heddle.services.runner_agent.launcher import Launcher, LauncherError
from heddle.services.runner_agent.output import LogPublisher
from heddle.services.runner_agent.outputs_file import OutputsFile
from heddle.services.runner_agent.process import ProcessResult, StepProcess, step_env
from heddle.services.runner_agent.workdir import Workdir
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.nats_types import NatsError
from heddle.shared.runtime import failpoints
from heddle.shared.runtime.metrics import ATTEMPTS
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import Outcome, StepFinished, StepReady, StepStarted, encode
from heddle.shared.wire.timefmt import now_rfc3339

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client, JetStreamContext, Msg

log = logging.getLogger("heddle.runner")
REPORT_ACK_TIMEOUT = 5.0  # seconds at most before the outcome is sent again (deduplicated)


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """What every attempt of one runner shares."""

    runner: str
    nc: Client
    js: JetStreamContext
    acked: AckedPublisher
    settings: Settings
    base_env: dict[str, str]  # credentials already removed (isolation.step_base_env)
    heartbeat_ttl: int
    run_as: StepUser | None = None  # where the runner can switch users
    launcher: Launcher | None = None  # spawns the steps as run_as


class Attempt:
    done: asyncio.Event  # set once its outcome is stored (or it ends unreported)

    def __init__(self, ctx: AttemptContext, ready: StepReady, after: Attempt | None = None) -> None:
        self.ctx = ctx
        self.ready = ready
        # A continuation (docs/latency.md, "Continuing a chain"): the attempt it
        # follows, whose outcome must be stored before this one's events are sent (its
        # ``done``; not the attempt, or a chain would keep every attempt in memory), and
        # whose kill is this one's. Owed: the orchestrator waits for it as for an answer.
        self._after_done: asyncio.Event | None = after.done if after is not None else None
        self.after_key: AttemptKey | None = after.key if after is not None else None
        self._owes_known = after is not None
        self.then: StepReady | None = None  # this attempt's own continuation, if given one
        self.process: StepProcess | None = None
        self.logs: LogPublisher | None = None
        self.failure: str | None = None  # the command could not be started
        self.outputs_file: OutputsFile | None = None  # $HEDDLE_OUTPUTS
        self.workdir: Workdir | None = None  # the command's, removed before the runner is free
        self.task: asyncio.Task | None = None
        self.done = asyncio.Event()
        self.beats = Heartbeats(
            ctx.acked,
            ctx.runner,
            ready,
            ctx.heartbeat_ttl,
            ctx.settings.heartbeat_interval,
            pid=lambda: self.process.pid if self.process else None,
        )
        self.started_at: str | None = None  # when the command was spawned
        self._announce_timer: asyncio.TimerHandle | None = None
        self._announcing: asyncio.Task | None = None
        self._answers: list[tuple[Msg, bytes]] = []  # "accepted", not sent yet
        self._answered = False  # the first report is out: later offers are answered at once
        self._answer_timer: asyncio.TimerHandle | None = None
        self._answering: asyncio.Task | None = None

    @property
    def key(self) -> AttemptKey:
        r = self.ready
        return (r.run_id, r.step_id, r.attempt)

    def same(self, run_id: str, step_id: str, attempt: int) -> bool:
        return self.key == (run_id, step_id, attempt)

    # ---- the command ----

    async def start(self, answer: tuple[Msg, bytes] | None = None) -> None:
        """Spawn the command; announce it at once or once it has run for the report delay.
        ``answer`` (the assignment and its "accepted"; None: nothing to send) leaves with
        the first report."""
        if answer is not None:
            self._answers.append(answer)
        ctx, ready = self.ctx, self.ready
        logs = self.logs = LogPublisher(
            ctx.nc,
            ctx.acked,
            ready.run_id,
            ready.step_id,
            ready.attempt,
            ctx.settings.log_line_max_bytes,
        )
        env = step_env(ctx.base_env, ready.run_id, ready.step_id, ready.attempt, ready.env)
        what = "outputs file"
        try:
            # Bounded while written: past the limit, the step is killed at once.
            limit, kill = ctx.settings.outputs_max_bytes, partial(self.kill, "failed")
            self.outputs_file = OutputsFile(ctx.run_as, limit, kill)
            env["HEDDLE_OUTPUTS"] = self.outputs_file.path
            what = "working directory"
            self.workdir = Workdir(ctx.run_as)
        except OSError as exc:
            log.warning("no %s for %s/%s: %s", what, ready.run_id, ready.step_id, exc)
            self.failure = f"could not make the {what}: {exc}"
        process = self.process = StepProcess(
            ready.command,
            env,
            ready.timeout_seconds,
            ctx.settings.kill_grace,
            ctx.settings.output_tail_bytes,
            sink=logs.write,
            run_as=ctx.run_as,
            launcher=ctx.launcher,
            cwd=self.workdir.path if self.workdir is not None else None,
        )
        self.beats.start()
        if self.failure is not None:
            process.started.set()  # never to be spawned: a kill request waits for nothing
            return
        try:
            process.start()
        # A failed spawn; a NUL byte in command or env; no step launcher.
        except (OSError, ValueError, LauncherError) as exc:
            log.exception("step %s/%s could not start", ready.run_id, ready.step_id)
            self.failure = f"could not run: {exc}"
            return
        self.started_at = now_rfc3339()
        logs.hold(f"started on runner {ctx.runner} (pid {process.pid})")
        delay = ctx.settings.started_report_delay
        if delay > 0:
            loop = asyncio.get_running_loop()
            self._announce_timer = loop.call_later(delay, self._announce_soon)
            # Well within the dispatcher's wait, whatever the report delay.
            answer_by = ctx.settings.assign_timeout / 4
            if answer_by < delay:
                self._answer_timer = loop.call_later(answer_by, self._answer_soon)
        elif self._after_done is not None:
            # A continuation is announced once the outcome of the one before is stored,
            # which waits for this start to return: not awaited here.
            self._announcing = asyncio.create_task(self._announce())
        else:
            await self._announce()

    async def answer_too(self, msg: Msg, accepted: bytes) -> None:
        """This attempt offered again (its offerer restarted before it heard the answer):
        accepted, with the first report as the first answer was, or at once if that is out."""
        if self._answered:
            await self._respond(msg, accepted)
        else:
            self._answers.append((msg, accepted))

    def _answer_soon(self) -> None:
        self._answer_timer = None
        if self._answers or self._owes_known:
            self._answering = asyncio.create_task(self._answer_alone())

    def _announce_soon(self) -> None:
        self._announce_timer = None
        self._announcing = asyncio.create_task(self._announce())

    async def _announce(self) -> None:
        """The log's first note and the started event.

        The started event is a plain publish into the stream, with no acknowledgement to
        wait for or read: it only moves the step from queued to running for people to see,
        while the heartbeat already stored makes the attempt known to the watchdog, and the
        outcome (acknowledged, re-sent until it lands) tells the whole story if a started
        event is ever lost (docs/latency.md)."""
        ctx, ready, process, logs = self.ctx, self.ready, self.process, self.logs
        assert process is not None and logs is not None and self.started_at is not None
        started = StepStarted(
            run_id=ready.run_id,
            step_id=ready.step_id,
            attempt=ready.attempt,
            runner=ctx.runner,
            ticket=ready.ticket,
            pid=process.pid or 0,
            started_at=self.started_at,
        )
        try:
            await self._answer_alone()
            await logs.release()
            await self._after_reported()  # a started event for a step still pending is fenced
            await ctx.nc.publish(
                names.evt(ready.run_id, ready.step_id, "started", ctx.runner),
                encode(started),
                headers={
                    "Nats-Msg-Id": names.event_msg_id(
                        "started", ready.run_id, ready.step_id, ready.attempt, ctx.runner
                    )
                },
            )
        except NatsError as exc:  # closed connection: the outcome is re-sent until it lands
            log.warning("started event of %s/%s not sent: %s", ready.run_id, ready.step_id, exc)

    async def run(
        self,
        free: Callable[[], None],
        go_on: Callable[[Attempt, StepReady], Awaitable[str]] | None = None,
    ) -> None:
        """Wait for the command, then report its outcome. ``free`` is called once the log
        is complete and before the outcome is published, so the dispatcher's next
        assignment (which follows the outcome) finds the runner idle. ``go_on`` starts the
        continuation of a success without outputs and names its step, first of all: it is
        what a chain waits for."""
        try:
            await self._finish(free, go_on)
        finally:
            # Whatever broke, the runner is free and the heartbeats stop: an attempt that
            # could not report goes silent, and the watchdog judges it (never a wedged runner).
            await self._tidy()
            free()
            self.beats.stop()
            if self.outputs_file is not None:  # not read: its file and watch go all the same
                self.outputs_file.close()
            self.done.set()

    async def _finish(
        self,
        free: Callable[[], None],
        go_on: Callable[[Attempt, StepReady], Awaitable[str]] | None,
    ) -> None:
        ready, process, logs = self.ready, self.process, self.logs
        assert process is not None and logs is not None
        try:
            if self.failure is not None:
                result = ProcessResult("failed", None, self.failure, "", "")
            else:
                result = await process.wait()
        except Exception as exc:  # last resort: whatever broke, the attempt's outcome is reported
            log.exception("step %s/%s failed to run", ready.run_id, ready.step_id)
            result = ProcessResult("failed", None, f"could not run: {exc}", "", "")
        finally:
            if self._announce_timer is not None:  # not due yet: the outcome tells it all
                self._announce_timer.cancel()
                self._announce_timer = None
            if self._answer_timer is not None:  # the answer goes with the outcome
                self._answer_timer.cancel()
                self._answer_timer = None
        await self._tidy()  # before a continuation starts or the runner is free
        # When the command ended: before its continuation's start, which follows it.
        ended_at = now_rfc3339()
        if self._announcing is not None:
            await self._announcing  # under way: the started event never follows the outcome
        outputs = self._outputs(result)
        if isinstance(outputs, str):
            result = ProcessResult(
                "failed", result.exit_code, outputs, result.stdout_tail, result.stderr_tail
            )
            outputs = {}
        continued = ""
        then, self.then = self.then, None
        if go_on is not None and then is not None and not outputs:
            if result.outcome == "succeeded":
                continued = await go_on(self, then)
                if continued:
                    failpoints.hit("runner.after_going_on")
        finished = StepFinished(
            run_id=ready.run_id,
            step_id=ready.step_id,
            attempt=ready.attempt,
            runner=self.ctx.runner,
            ticket=ready.ticket,
            outcome=result.outcome,
            finished_at=ended_at,
            exit_code=result.exit_code,
            reason=result.reason,
            stdout_tail=result.stdout_tail,
            stderr_tail=result.stderr_tail,
            started_at=self.started_at,
            pid=process.pid if self.started_at else None,
            outputs=outputs,
            continued=continued,
            continued_ticket=then.ticket if continued and then is not None else "",
        )
        ATTEMPTS.labels(finished.outcome).inc()
        await self._send_answer()
        try:
            await logs.close(_summary(finished))
        except Exception:  # the log's last note is not worth the outcome
            log.exception("log of %s/%s not closed", ready.run_id, ready.step_id)
        free()
        await self._after_reported()  # the orchestrator learns of this one from that one
        # Heartbeats go on until the outcome is stored (``run`` stops them): a runner still
        # trying to report (a broker that came back, an acknowledgement lost) is not silent.
        await self._report(finished)

    async def _tidy(self) -> None:
        workdir, self.workdir = self.workdir, None
        if workdir is not None:
            await workdir.remove(self.ctx.launcher)

    def _outputs(self, result: ProcessResult) -> dict[str, str] | str:
        """The outputs of a succeeded attempt, or why they fail it (outputs_file.py)."""
        file, self.outputs_file = self.outputs_file, None
        if file is None:
            return {}
        return file.take(result.outcome == "succeeded", self.ctx.settings.outputs_max_bytes)

    async def _answer_alone(self) -> None:
        """An answer that does not travel with the outcome follows the first heartbeat, so
        the attempt can be found from the moment it is acknowledged. A continuation owes
        the same: the orchestrator waits for it as for an answer."""
        if self._answers or self._owes_known:
            self._owes_known = False
            await self.beats.first()
            await self._send_answer()

    async def _after_reported(self) -> None:
        """Once the outcome of the attempt this continues is stored (it is re-sent until
        it is): before it, the orchestrator holds this step as pending."""
        if self._after_done is not None:
            await self._after_done.wait()

    async def _send_answer(self) -> None:
        self._answered = True
        answers, self._answers = self._answers, []
        for msg, accepted in answers:
            await self._respond(msg, accepted)

    @staticmethod
    async def _respond(msg: Msg, accepted: bytes) -> None:
        try:
            await msg.respond(accepted)
        except NatsError as exc:  # the offerer finds the attempt by its heartbeat or outcome
            log.warning("answer to %s not sent: %s", msg.subject, exc)

    def _report_wait(self) -> float:
        """How long an outcome waits for its acknowledgement before it is sent again: well
        within the silence limit, so a publish lost with a crashed broker is re-sent soon."""
        return min(REPORT_ACK_TIMEOUT, max(0.5, self.ctx.settings.silence_limit / 4))

    def kill(self, outcome: Outcome, reason: str) -> None:
        if self.process is not None:
            self.process.kill(outcome, reason)

    async def _report(self, finished: StepFinished) -> None:
        """Publish the outcome until it lands: an outcome is never lost to an outage."""
        msg_id = names.event_msg_id(
            "finished", finished.run_id, finished.step_id, finished.attempt, finished.runner
        )
        delay = 0.2
        t0 = time.monotonic()
        payload = encode(finished)
        while True:
            try:
                ack = await self.ctx.acked.publish(
                    names.evt(finished.run_id, finished.step_id, "finished", finished.runner),
                    payload,
                    headers={"Nats-Msg-Id": msg_id},
                )
                await asyncio.wait_for(ack, self._report_wait())
                break
            except Exception as exc:  # never given up: any failure, known or not, is retried
                log.warning("reporting %s failed (%s); retrying", msg_id, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        event(
            log,
            "finished",
            runner=self.ctx.runner,
            run=finished.run_id,
            step=finished.step_id,
            attempt=finished.attempt,
            outcome=finished.outcome,
            exit_code=finished.exit_code,
            ms=round((time.monotonic() - t0) * 1000, 1),
        )


def _summary(ev: StepFinished) -> str:
    if ev.outcome == "succeeded":
        return "succeeded"
    return f"{ev.outcome.replace('_', ' ')}: {ev.reason}"
