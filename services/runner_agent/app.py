"""The runner agent: runs one step at a time and reports what it sees.

It takes assignments on its own subject (``assignments.py``; ``attempt.py`` carries out each
accepted one: the command, its heartbeats, its output, its outcome), answers kill requests
for the attempt it runs (``kill_requests.py``), and keeps its entry in heddle-runners
(``registration.py``), so a runner that dies leaves the pool. This module is the process
around them: the step user, the connection, the registry entry, shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
from typing import TYPE_CHECKING

from heddle.services.runner_agent.assignments import Assignments
from heddle.services.runner_agent.attempt_context import AttemptContext
from heddle.services.runner_agent.isolation import (
    StepUser,
    make_undumpable,
    step_base_env,
    take_step_user,
)
from heddle.services.runner_agent.kill_requests import KillRequests
from heddle.services.runner_agent.launcher import Launcher
from heddle.services.runner_agent.registration import Registration
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.nats_io import close, connect_until_ready
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.runtime.stalls import LoopStalls
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunnerInfo
from heddle.shared.wire.timefmt import now_rfc3339
from heddle.shared.wire.version import VERSION

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client

log = logging.getLogger("heddle.runner")


def runner_name(settings: Settings) -> str:
    return settings.runner_name or settings.pod_name or f"{socket.gethostname()}-{os.getpid()}"


class RunnerAgent:
    name = "runner"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runner = runner_name(settings)
        if not names.ID_PATTERN.match(self.runner):
            raise ValueError(f"runner name {self.runner!r} must match {names.ID_PATTERN.pattern}")
        self.started_at = now_rfc3339()
        self._subs: list = []
        self.nc: Client | None = None
        self.registration: Registration | None = None
        self.run_as: StepUser | None = None
        self.launcher: Launcher | None = None
        # Half the assignment timeout: one accepted before it is answered within a quarter
        # of the timeout more (first_report.py), so in time.
        self.stalls = LoopStalls(settings.assign_timeout / 2)
        self.assignments = Assignments(settings, self.runner, self.stalls, self._registration_soon)
        self.kills = KillRequests(self.runner, self.assignments)

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
        self.assignments.ctx = AttemptContext(
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
            await self.nc.subscribe(
                names.runner_assign(self.runner), cb=self.assignments.on_assign
            ),
            await self.nc.subscribe(names.runner_cancel(self.runner), cb=self.kills.on_cancel),
        ]
        await self.nc.flush()
        await self.registration.write()
        self.registration.start_refreshing()
        event(log, "runner ready", runner=self.runner)

    async def stop(self) -> None:
        assignments = self.assignments
        if assignments.stopping:
            return
        assignments.stopping = True  # refuse new assignments from here on
        current = assignments.current
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
        if self.assignments.ctx is not None:
            self.assignments.ctx.acked.lost()

    async def _reconnected(self) -> None:
        if self.registration is not None:
            with contextlib.suppress(Exception):
                await self.registration.write()

    def _info(self) -> RunnerInfo:
        cur = self.assignments.current
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
            jobs=self.assignments.jobs,
            pool=self.settings.runner_pool,
            labels=self.assignments.labels,
            namespaces=self.assignments.namespaces,
        )

    def _registration_soon(self) -> None:
        """The registry entry rewritten soon (busy or idle); made in start()."""
        if self.registration is not None:
            self.registration.soon()
