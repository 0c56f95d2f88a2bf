"""The periodic look for queued steps that no registered runner can take, and their end
(services/orchestrator/unplaceable.py decides; docs/pools.md, "No runner with those
labels"). Runs only looked at: a run whose steps ask for no labels costs nothing here, unless
a runner of the default pool is restricted to namespaces (docs/namespaces.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import msgspec
from heddle.services.orchestrator.actor import RunActor
from heddle.services.orchestrator.messages import NoRunner
from heddle.services.orchestrator.unplaceable import Runner, Unplaceable, Waiting
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.broker.nats_types import NatsError
from heddle.shared.broker.resources import Resources
from heddle.shared.core.labels import DEFAULT_POOL, label_key, runner_labels
from heddle.shared.runtime.metrics import WAITING_OLDEST, WAITING_STEPS
from heddle.shared.runtime.periodic import Periodic
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import runner_info_decoder

log = logging.getLogger("heddle.orchestrator")


class NoRunnerLook:
    def __init__(
        self,
        settings: Settings,
        res: Resources,
        actors: dict[str, RunActor],
        growable: Sequence[Runner] = (),
    ) -> None:
        self.js = res.js
        self.runners_kv = res.kv[names.RUNNERS_BUCKET]
        self.actors = actors
        self.growable = growable  # a runner of each pool autoscaling may grow
        self.unplaceable = Unplaceable(settings.no_runner_timeout)
        period = min(settings.watchdog_scan, settings.no_runner_timeout / 4)
        self._periodic = Periodic("no-runner look", period, self.look, log)
        self._asks: dict[str, bool] = {}  # by run: whether any of its steps has runsOn
        self._counted: set[str] = set()  # the label keys of the no-runner series set
        # A default pool's runner restricted to namespaces (at the last look; the first
        # looks): then steps without runsOn are looked at too, and the registry read each
        # time, since some namespace's steps may have no runner.
        self._all_steps = True

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    def _waiting(self) -> Iterator[Waiting]:
        asks: dict[str, bool] = {}  # the live runs' only: an ended run's entry goes
        for run_id, actor in list(self.actors.items()):
            steps = actor.state.steps
            known = self._asks.get(run_id)
            asks[run_id] = any(s.runs_on for s in steps.values()) if known is None else known
            if asks[run_id] or self._all_steps:
                for s in steps.values():
                    wants = s.runs_on or self._all_steps
                    if s.status == "queued" and wants and s.offered_to is None:
                        yield Waiting(run_id, s.id, s.attempt, tuple(s.runs_on))
        self._asks = asks

    async def look(self) -> None:
        waiting = list(self._waiting())
        if not waiting and not self.unplaceable.since and not self._all_steps:
            self._count([], time.monotonic())
            return
        try:
            entries = await read_current(self.runners_kv, ">")
        except (NatsError, TimeoutError) as exc:
            log.warning("no-runner look: the registry could not be read: %s", exc)
            return
        runners = []
        for entry in entries:
            try:
                info = runner_info_decoder.decode(entry.value)
            except msgspec.DecodeError:
                continue
            labels = runner_labels(info.pool, info.labels)
            runners.append(Runner(info.pool, labels, info.namespaces))
        self._all_steps = any(r.pool == DEFAULT_POOL and r.namespaces for r in runners)
        now = time.monotonic()
        verdicts = self.unplaceable.verdicts(waiting, runners, self.growable, now)
        self._count(waiting, now)
        for step, reason in verdicts:
            await self._end(step, reason)

    def _count(self, waiting: list[Waiting], now: float) -> None:
        """The steps no runner can take, by the labels they ask for: the metrics' no-runner
        (the dispatchers have no lane for them)."""
        found: dict[str, list[float]] = {}
        for step in waiting:
            since = self.unplaceable.since.get(step.key)
            if since is not None:
                counts = found.setdefault(label_key(step.runs_on), [0, 0.0])
                counts[0] += 1
                counts[1] = max(counts[1], now - since)
        for key in self._counted - found.keys():
            WAITING_STEPS.labels(key, "no-runner").set(0)
            WAITING_OLDEST.labels(key, "no-runner").set(0)
        for key, (count, oldest) in found.items():
            WAITING_STEPS.labels(key, "no-runner").set(count)
            WAITING_OLDEST.labels(key, "no-runner").set(round(oldest, 3))
        self._counted |= found.keys()

    async def _end(self, step: Waiting, reason: str) -> None:
        actor = self.actors.get(step.run_id)
        if actor is None:
            return
        subject = names.step_ready(step.run_id, step.step_id, key=label_key(step.runs_on))
        try:
            # Gone from the stream first: no runner that joins later runs a failed step.
            await self.js.purge_stream(names.STEPS_STREAM, subject=subject)
        except NatsError as exc:
            log.warning("no-runner look: %s not purged, judged again later: %s", subject, exc)
            return
        event(log, "no runner", run=step.run_id, step=step.step_id, attempt=step.attempt)
        actor.post(NoRunner(step.step_id, step.attempt, reason))
