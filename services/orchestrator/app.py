"""The orchestrator: sole owner of run and step state.

It takes its share of the partitions (leases.py); for each partition taken it rebuilds the
live runs from the heddle-runs bucket (partitions.py), then consumes the partition's commands
(HEDDLE_CMD) and events (HEDDLE_EVENTS) through durable consumers, each taken to its run's
actor (routing.py, live_runs.py). Heartbeats, the watchdog and the backstop are liveness.py's.
This module builds those parts once, each after what it needs, and starts and stops them."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from heddle.services.orchestrator.child_runs import ChildRuns
from heddle.services.orchestrator.consumers import PartitionConsumers
from heddle.services.orchestrator.effects import EffectRunner
from heddle.services.orchestrator.gate_look import GateLook
from heddle.services.orchestrator.handoff import Handoffs
from heddle.services.orchestrator.keys import ConcurrencyKeys
from heddle.services.orchestrator.leases import Leases, member_name
from heddle.services.orchestrator.live_runs import LiveRuns
from heddle.services.orchestrator.liveness import Liveness
from heddle.services.orchestrator.namespace_quotas import NamespaceQuotas
from heddle.services.orchestrator.no_runner import NoRunnerLook
from heddle.services.orchestrator.partitions import Partitions
from heddle.services.orchestrator.pod_watch import PodWatch, wanted
from heddle.services.orchestrator.routing import Router
from heddle.services.orchestrator.run_window import RunWindow
from heddle.services.orchestrator.slots import Slots
from heddle.services.orchestrator.state import Policy
from heddle.services.orchestrator.store_keeper import StoreKeeper
from heddle.services.orchestrator.submissions import Submissions
from heddle.services.orchestrator.unplaceable import Runner
from heddle.services.orchestrator.workflows import WorkflowFeatures
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.consume import Outcome
from heddle.shared.broker.nats_io import close, connect_until_ready
from heddle.shared.broker.offers import OfferDesk
from heddle.shared.broker.pull import Handler
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.core.partitions import subject_partition
from heddle.shared.core.runner_pools import parse_pools
from heddle.shared.core.validation import Limits
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client, Msg

log = logging.getLogger("heddle.orchestrator")


class Orchestrator:
    name = "orchestrator"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.policy = Policy(
            retry_base=settings.retry_base,
            retry_cap=settings.retry_cap,
            default_timeout=settings.default_timeout,
            handoff=settings.handoff == "on",
            continuations=settings.continue_chains == "on",
            max_items=settings.max_items,
            max_call_depth=settings.max_call_depth,
        )
        self.limits = Limits(settings.max_steps, settings.max_command_bytes)
        self.instance = member_name(settings)
        self.runs = LiveRuns(settings.max_runs_under_way, settings.partitions)
        # The parts start() makes, as they need the connection.
        self.nc: Client | None = None
        self.acked: AckedPublisher | None = None
        self.leases: Leases | None = None
        self.handoffs: Handoffs | None = None
        self.workflows: WorkflowFeatures | None = None  # history, cron, retention
        self.liveness: Liveness | None = None
        self.window: RunWindow | None = None
        self.no_runner: NoRunnerLook | None = None
        self.gate_look: GateLook | None = None  # answers whose command was lost
        self.consumers: PartitionConsumers | None = None
        self.pod_watch: PodWatch | None = None  # in a cluster only (pod_watch.py)
        self.slots: Slots | None = None  # the semaphores' slots (slots.py)
        self.quotas: NamespaceQuotas | None = None  # the namespaces' (namespace_quotas.py)
        self.keys: ConcurrencyKeys | None = None  # the runs' concurrency keys (keys.py)
        self._stopping = False

    # ---- lifecycle ----

    async def start(self) -> None:
        settings = self.settings
        self.nc = nc = await connect_until_ready(
            settings,
            f"heddle-orchestrator-{self.instance}",
            on_reconnect=self._reconnected,
            on_disconnect=self._disconnected,
        )
        res = await ensure_resources(nc, settings)
        # A ready message carries the step's variables: one too large for the server fails
        # its step with a reason instead (RunSteps.ready_message); 1 KiB is left for headers.
        self.window = RunWindow(settings, res.js)
        await self.window.start()
        self.policy = dataclasses.replace(
            self.policy, max_ready_bytes=max(nc.max_payload - 1024, 1024), window=self.window
        )
        runs, runs_kv = self.runs, res.kv[names.RUNS_BUCKET]
        self.acked = await AckedPublisher(nc).start()
        self.leases = Leases(res.kv[names.LEASES_BUCKET], settings, self.instance)
        desk = OfferDesk(nc)
        await desk.start()
        self.handoffs = Handoffs(nc, desk, settings.assign_timeout, runs)
        keys_kv = res.kv[names.CONCURRENCY_BUCKET]
        self.quotas = quotas = NamespaceQuotas(
            res.kv[names.NAMESPACES_BUCKET], res.kv[names.SEMAPHORES_BUCKET], keys_kv
        )
        await quotas.start()  # every quota known before a run is taken
        self.policy = dataclasses.replace(
            self.policy, step_quota=quotas.running_steps, runs_quota=quotas.runs_under_way
        )
        self.slots = Slots(res.kv[names.SEMAPHORES_BUCKET], runs, quotas.running_steps)
        self.keys = ConcurrencyKeys(keys_kv, res.js, runs, quotas.runs_under_way)
        # A holder that stood still writes nothing until its lease is renewed.
        runner = EffectRunner(
            nc,
            res.js,
            self.acked,
            runs=runs,
            handoffs=self.handoffs,
            lease=self.leases,
            slots=self.slots,
            keys=self.keys,
            children=ChildRuns(self.acked, res.kv[names.WORKFLOWS_BUCKET], runs_kv, self.limits),
        )
        keeper = StoreKeeper(nc, res.js, settings)  # the store's use; logs purged for room
        self.workflows = WorkflowFeatures(settings, res, runs.actors, runner, keeper)
        effects = self.workflows.effects  # the same runner, also feeding run history
        self.liveness = Liveness(settings, res, runs.actors)
        runs.start(effects, self.liveness)
        submissions = Submissions(nc, res.js, runs_kv, self.limits, self.policy, runs)
        router = Router(runs, submissions, effects, heard=desk.heard)
        self.consumers = PartitionConsumers(
            nc, res.js, self._guard(router.on_command), self._guard(router.on_event)
        )
        partitions = Partitions(
            runs,
            runs_kv,
            self.policy,
            self.consumers,
            self.liveness,
            self.workflows,
            settings.shutdown_grace,
            self.slots,
            self.keys,
        )
        self.workflows.start()
        self.slots.start()
        self.keys.start()
        self.liveness.start()
        growable = [  # pools autoscaling may grow: a step for them waits for their runners
            Runner(p.name, p.labels, p.namespaces)
            for p in parse_pools(settings.runner_pools)
            if p.autoscaling and p.max_replicas
        ]
        self.no_runner = NoRunnerLook(settings, res, runs.actors, growable)
        self.no_runner.start()
        self.gate_look = GateLook(settings, res, runs.actors)
        self.gate_look.start()
        if wanted(settings):
            self.pod_watch = PodWatch(settings, res.kv[names.PODS_BUCKET], self.liveness)
            await self.pod_watch.start()
        await self.leases.start(partitions)  # takes this orchestrator's share of them

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.runs.stop()  # whoever takes the partitions admits their waiting runs
        if self.pod_watch is not None:
            await self.pod_watch.stop()
        if self.window is not None:
            await self.window.stop()
        if self.liveness is not None:
            await self.liveness.stop()
        if self.no_runner is not None:
            await self.no_runner.stop()
        if self.gate_look is not None:
            await self.gate_look.stop()
        if self.leases is not None:
            await self.leases.stop()  # each run finishes what it took, within the grace
        if self.liveness is not None:
            await self.liveness.stop_watch()
        if self.workflows is not None:
            await self.workflows.stop()
        if self.slots is not None:
            await self.slots.stop()
        if self.quotas is not None:
            await self.quotas.stop()
        if self.keys is not None:
            await self.keys.stop()
        if self.handoffs is not None:
            await self.handoffs.stop()
        await close(self.nc)

    async def _disconnected(self) -> None:
        if self.acked is not None:
            self.acked.lost()
        if self.liveness is not None:
            self.liveness.disconnected()
        if self.leases is not None:
            self.leases.disconnected()  # nobody is judged silent over an outage

    async def _reconnected(self) -> None:
        if self.consumers is not None:
            await self.consumers.reconnected()
        if self.liveness is not None:
            self.liveness.reconnected()
        if self.leases is not None:
            self.leases.reconnected()

    # ---- what is delivered ----

    def _guard(self, handler: Handler) -> Handler:
        async def guarded(msg: Msg) -> Outcome:
            if self._stopping:
                return Outcome.LEFT  # delivered again to whoever takes the partition
            if not self._acting_on(msg):
                return Outcome.FAILED  # not this orchestrator's to act on now: asked again
            return await handler(msg)

        return guarded

    def _acting_on(self, msg: Msg) -> bool:
        """Whether the message's partition is held here, under a lease still fresh."""
        held = self.consumers is not None and self.consumers.holds(subject_partition(msg.subject))
        return held and self.leases is not None and self.leases.fresh()
