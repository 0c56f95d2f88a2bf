"""The runner agent: runs one step at a time and reports what it sees.

It accepts an assignment on its own subject, writes the step's first heartbeat *before*
answering (so an accepted attempt is always visible to the watchdog), runs the command,
streams its output, heartbeats while it runs, and publishes started and finished events.
It registers itself in heddle-runners with a TTL, so a runner that dies leaves the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.aio.msg import Msg

from services.runner_agent.output import LogPublisher
from services.runner_agent.process import ProcessResult, StepProcess, step_env
from shared import failpoints, names
from shared.contracts import (
    AssignReply,
    Heartbeat,
    RunnerInfo,
    StepFinished,
    StepReady,
    StepStarted,
    cancel_attempt_decoder,
    encode,
    step_ready_decoder,
)
from shared.nats_io import close, connect_until_ready, ensure_resources
from shared.service import event
from shared.settings import Settings
from shared.timefmt import now_rfc3339

log = logging.getLogger("heddle.runner")
VERSION = "0.1.0"
REGISTRY_COALESCE = 0.1  # seconds
REPORT_ACK_TIMEOUT = 5.0  # seconds before the outcome is published again (deduplicated)


@dataclass
class Current:
    ready: StepReady
    process: StepProcess | None = None
    logs: LogPublisher | None = None
    failure: str | None = None  # the command could not be started
    task: asyncio.Task | None = None
    seq: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


def runner_name(settings: Settings) -> str:
    return settings.runner_name or settings.pod_name or f"{socket.gethostname()}-{os.getpid()}"


class RunnerAgent:
    name = "runner"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runner = runner_name(settings)
        if not names.ID_PATTERN.match(self.runner):
            raise ValueError(f"runner name {self.runner!r} must match {names.ID_PATTERN.pattern}")
        self.current: Current | None = None
        self.jobs = 0
        self.started_at = now_rfc3339()
        self._subs: list = []
        self._tasks: list[asyncio.Task] = []
        self._registering: asyncio.Task | None = None
        self._stopping = False
        self._base_env = dict(os.environ)
        self._hb_ttl = max(10, math.ceil(settings.silence_limit * 2))
        self.nc: Client | None = None

    # ---- lifecycle ----

    async def start(self) -> None:
        self.nc = await connect_until_ready(
            self.settings, f"heddle-runner-{self.runner}", on_reconnect=self._reconnected
        )
        res = await ensure_resources(
            self.nc,
            self.settings,
            streams=(names.EVENTS_STREAM, names.LOGS_STREAM),
            buckets=(names.HEARTBEATS_BUCKET, names.RUNNERS_BUCKET),
        )
        self.js = res.js
        self._subs = [
            await self.nc.subscribe(names.runner_assign(self.runner), cb=self._on_assign),
            await self.nc.subscribe(names.runner_cancel(self.runner), cb=self._on_cancel),
        ]
        await self.nc.flush()
        await self._register()
        self._tasks = [asyncio.create_task(self._registry_loop(), name="registry")]
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
                if current.process:
                    current.process.kill("cancelled", f"runner {self.runner} shut down")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(current.done.wait(), self.settings.kill_grace + 5)
        if self._registering is not None:
            self._tasks.append(self._registering)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.nc and not self.nc.is_closed:
            with contextlib.suppress(Exception):
                kv = await self.js.key_value(names.RUNNERS_BUCKET)
                await kv.delete(self.runner)
        await close(self.nc)

    async def _reconnected(self) -> None:
        with contextlib.suppress(Exception):
            await self._register()

    # ---- registry ----

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

    async def _register(self) -> None:
        await self.js.publish(
            names.kv_subject(names.RUNNERS_BUCKET, self.runner),
            encode(self._info()),
            msg_ttl=max(1, self.settings.registry_ttl),
        )

    async def _register_unconfirmed(self) -> None:
        """A status change, without waiting for (or reading) an acknowledgement: if it is
        lost, the next refresh (every ``HEDDLE_REGISTRY_INTERVAL``) says the same."""
        await self.nc.publish(
            names.kv_subject(names.RUNNERS_BUCKET, self.runner),
            encode(self._info()),
            headers={"Nats-TTL": str(int(max(1, self.settings.registry_ttl)))},
        )

    def _register_soon(self) -> None:
        """Show a status change in the registry shortly. Changes within the coalescing
        window share one write, so short steps cost no registry write each: the registry
        is for people and for a restarted dispatcher; live leases follow the events."""
        if self._registering is None or self._registering.done():
            self._registering = asyncio.create_task(self._register_later())

    async def _register_later(self) -> None:
        await asyncio.sleep(REGISTRY_COALESCE)
        with contextlib.suppress(Exception):
            await self._register_unconfirmed()

    async def _registry_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.registry_interval)
            try:
                await self._register()
            except Exception as exc:
                log.warning("registry refresh failed: %s", exc)

    # ---- assignments ----

    async def _on_assign(self, msg: Msg) -> None:
        try:
            ready = step_ready_decoder.decode(msg.data)
        except Exception as exc:
            await msg.respond(
                encode(
                    AssignReply(
                        accepted=False, runner=self.runner, reason=f"undecodable assignment: {exc}"
                    )
                )
            )
            return
        if self._stopping or self.current is not None:
            busy = "shutting down" if self._stopping else "busy"
            await msg.respond(
                encode(AssignReply(accepted=False, runner=self.runner, reason=busy, jobs=self.jobs))
            )
            return
        current = Current(ready)
        self.current = current
        self.jobs += 1
        try:
            # First heartbeat before the answer: an accepted attempt is never invisible.
            await self._heartbeat(current)
        except Exception as exc:
            self.current = None
            await msg.respond(
                encode(
                    AssignReply(
                        accepted=False, runner=self.runner, reason=f"heartbeat failed: {exc}"
                    )
                )
            )
            return
        await msg.respond(encode(AssignReply(accepted=True, runner=self.runner, jobs=self.jobs)))
        event(
            log,
            "accepted",
            runner=self.runner,
            run=ready.run_id,
            step=ready.step_id,
            attempt=ready.attempt,
        )
        if failpoints.active("runner.after_accept"):
            await self.nc.flush()  # the acceptance reaches the dispatcher, then we die
            failpoints.hit("runner.after_accept")
        # Spawned in this same turn of the loop, so the reply, the log's first note and
        # the started event leave in one write to the server.
        await self._start(current)
        current.task = asyncio.create_task(self._run(current))
        self._register_soon()

    async def _on_cancel(self, msg: Msg) -> None:
        try:
            req = cancel_attempt_decoder.decode(msg.data)
        except Exception:
            return
        cur = self.current
        if cur is None or (cur.ready.run_id, cur.ready.step_id, cur.ready.attempt) != (
            req.run_id,
            req.step_id,
            req.attempt,
        ):
            return
        event(
            log,
            "kill requested",
            runner=self.runner,
            run=req.run_id,
            step=req.step_id,
            attempt=req.attempt,
            reason=req.reason,
        )
        if cur.process is not None:
            await cur.process.started.wait()
            cur.process.kill("cancelled", req.reason)

    async def _heartbeat(self, current: Current) -> None:
        ready = current.ready
        current.seq += 1
        hb = Heartbeat(
            runner=self.runner,
            run_id=ready.run_id,
            step_id=ready.step_id,
            attempt=ready.attempt,
            seq=current.seq,
            pid=current.process.pid if current.process else None,
        )
        await self.js.publish(
            names.kv_subject(
                names.HEARTBEATS_BUCKET, names.heartbeat_key(ready.run_id, ready.step_id)
            ),
            encode(hb),
            msg_ttl=self._hb_ttl,
        )

    async def _heartbeat_loop(self, current: Current) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            try:
                await self._heartbeat(current)
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)

    async def _start(self, current: Current) -> None:
        """Spawn the command and announce it: a note in its log and the started event.

        The started event is a plain publish into the stream, with no acknowledgement to
        wait for or read: it only moves the step from queued to running for people to see,
        while the heartbeat already stored makes the attempt known to the watchdog, and the
        outcome (acknowledged, re-sent until it lands) tells the whole story if a started
        event is ever lost (docs/architecture.md)."""
        ready = current.ready
        current.logs = LogPublisher(
            self.js, ready.run_id, ready.step_id, ready.attempt, self.settings.log_line_max_bytes
        )
        process = current.process = StepProcess(
            ready.command,
            step_env(self._base_env, ready.run_id, ready.step_id, ready.attempt),
            ready.timeout_seconds,
            self.settings.kill_grace,
            self.settings.output_tail_bytes,
            sink=current.logs.write,
        )
        try:
            process.start()
        except Exception as exc:
            log.exception("step %s/%s could not start", ready.run_id, ready.step_id)
            current.failure = f"could not run: {exc}"
            return
        await current.logs.note(f"started on runner {self.runner} (pid {process.pid})")
        started = StepStarted(
            run_id=ready.run_id,
            step_id=ready.step_id,
            attempt=ready.attempt,
            runner=self.runner,
            pid=process.pid or 0,
            started_at=now_rfc3339(),
        )
        try:
            await self.nc.publish(
                names.evt(ready.run_id, ready.step_id),
                encode(started),
                headers={
                    "Nats-Msg-Id": names.event_msg_id(
                        "started", ready.run_id, ready.step_id, ready.attempt
                    )
                },
            )
        except Exception as exc:  # closed connection: the outcome is re-sent until it lands
            log.warning("started event of %s/%s not sent: %s", ready.run_id, ready.step_id, exc)

    async def _run(self, current: Current) -> None:
        ready, process, logs = current.ready, current.process, current.logs
        assert process is not None and logs is not None
        beating = asyncio.create_task(self._heartbeat_loop(current))
        try:
            if current.failure is not None:
                result = ProcessResult("failed", None, current.failure, "", "")
            else:
                result = await process.wait()
        except Exception as exc:
            log.exception("step %s/%s failed to run", ready.run_id, ready.step_id)
            result = ProcessResult("failed", None, f"could not run: {exc}", "", "")
        finally:
            beating.cancel()
        finished = StepFinished(
            run_id=ready.run_id,
            step_id=ready.step_id,
            attempt=ready.attempt,
            runner=self.runner,
            outcome=result.outcome,
            finished_at=now_rfc3339(),
            exit_code=result.exit_code,
            reason=result.reason,
            stdout_tail=result.stdout_tail,
            stderr_tail=result.stderr_tail,
        )
        await logs.close(_summary(finished))
        # Free before reporting, so the dispatcher's next assignment finds us idle.
        self.current = None
        try:
            await self._report(finished)
        finally:
            current.done.set()
        self._register_soon()

    async def _report(self, finished: StepFinished) -> None:
        """Publish the outcome until it lands: an outcome is never lost to an outage."""
        msg_id = names.event_msg_id("finished", finished.run_id, finished.step_id, finished.attempt)
        delay = 0.2
        t0 = time.monotonic()
        payload = encode(finished)
        while True:
            try:
                ack = await self.js.publish_async(
                    names.evt(finished.run_id, finished.step_id),
                    payload,
                    headers={"Nats-Msg-Id": msg_id},
                )
                await asyncio.wait_for(ack, REPORT_ACK_TIMEOUT)
                break
            except Exception as exc:
                log.warning("reporting %s failed (%s); retrying", msg_id, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        event(
            log,
            "finished",
            runner=self.runner,
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
