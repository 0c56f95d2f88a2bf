"""One accepted assignment, from its command's start to its reported outcome.

An attempt spawns the command, heartbeats while it runs (heartbeats.py: from its first
report or answer on, so a short step writes none), streams its output, answers and
announces itself when due (first_report.py), and publishes the outcome until it lands
(outcome_report.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from heddle.services.runner_agent.attempt_context import AttemptContext
from heddle.services.runner_agent.continuations import AttemptKey
from heddle.services.runner_agent.first_report import FirstReport
from heddle.services.runner_agent.heartbeats import Heartbeats
from heddle.services.runner_agent.launcher import LauncherError
from heddle.services.runner_agent.outcome_report import report, summary
from heddle.services.runner_agent.output import LogPublisher
from heddle.services.runner_agent.outputs_file import OutputsFile
from heddle.services.runner_agent.process import StepProcess
from heddle.services.runner_agent.process_result import ProcessResult
from heddle.services.runner_agent.step_environment import step_env
from heddle.services.runner_agent.workdir import Workdir
from heddle.shared.runtime import failpoints
from heddle.shared.runtime.metrics import ATTEMPTS
from heddle.shared.wire.contracts import Outcome, StepFinished, StepReady
from heddle.shared.wire.timefmt import now_rfc3339

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Msg

log = logging.getLogger("heddle.runner")


class Attempt:
    done: asyncio.Event  # set once its outcome is stored (or it ends unreported)

    def __init__(self, ctx: AttemptContext, ready: StepReady, after: Attempt | None = None) -> None:
        self.ctx = ctx
        self.ready = ready
        # A continuation (docs/latency.md, "Continuing a chain"): the attempt it
        # follows, whose outcome must be stored before this one's events are sent (its
        # ``done``; not the attempt, or a chain would keep every attempt in memory), and
        # whose kill is this one's.
        self.after_key: AttemptKey | None = after.key if after is not None else None
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
        self.first_report = FirstReport(
            ctx, ready, self.beats, after.done if after is not None else None
        )
        self.started_at: str | None = None  # when the command was spawned
        self.jobs = 0  # the runner's accepted assignments once it took this one

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
            self.first_report.owe(answer)
        ctx, ready = self.ctx, self.ready
        logs = self.logs = LogPublisher(
            ctx.nc,
            ctx.acked,
            ready.run_id,
            ready.step_id,
            ready.attempt,
            ctx.settings.log_line_max_bytes,
            ctx.runner,
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
        # Stamped as the spawn is asked for: the command may run before the launcher's
        # answer is read, and an attempt's duration never reads shorter than its command.
        spawning_at = now_rfc3339()
        try:
            process.start()
        # A failed spawn; a NUL byte in command or env; no step launcher.
        except (OSError, ValueError, LauncherError) as exc:
            log.exception("step %s/%s could not start", ready.run_id, ready.step_id)
            self.failure = f"could not run: {exc}"
            return
        started_at = self.started_at = spawning_at
        logs.hold(f"started on runner {ctx.runner} (pid {process.pid})")
        if not self.first_report.announce_later(logs, process.pid, started_at):
            await self.first_report.announce()

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
        ready, process, logs, first = self.ready, self.process, self.logs, self.first_report
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
            first.cut_short()
        await self._tidy()  # before a continuation starts or the runner is free
        # When the command ended: before its continuation's start, which follows it.
        ended_at = now_rfc3339()
        if first.announcing is not None:
            await first.announcing  # under way: the started event never follows the outcome
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
        finished = self._finished(result, ended_at, outputs, continued, then)
        ATTEMPTS.labels(finished.outcome).inc()
        await first.send_answers(outcome_follows=True)
        try:
            await logs.close(summary(finished))
        except Exception:  # the log's last note is not worth the outcome
            log.exception("log of %s/%s not closed", ready.run_id, ready.step_id)
        free()
        await first.after_reported()  # the orchestrator learns of this one from that one
        # Heartbeats go on until the outcome is stored (``run`` stops them): a runner still
        # trying to report (a broker that came back, an acknowledgement lost) is not silent.
        await report(self.ctx, finished)

    def _finished(
        self,
        result: ProcessResult,
        ended_at: str,
        outputs: dict[str, str],
        continued: str,
        then: StepReady | None,
    ) -> StepFinished:
        """The outcome event: what the command did, and the continuation it went on to."""
        ready, process = self.ready, self.process
        return StepFinished(
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
            pid=process.pid if self.started_at and process is not None else None,
            outputs=outputs,
            continued=continued,
            continued_ticket=then.ticket if continued and then is not None else "",
            jobs=self.jobs,
        )

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

    def kill(self, outcome: Outcome, reason: str) -> None:
        if self.process is not None:
            self.process.kill(outcome, reason)
