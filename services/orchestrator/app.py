"""The orchestrator: sole owner of run and step state.

It consumes commands (HEDDLE_CMD) and runner events (HEDDLE_EVENTS) through durable
consumers, routes each to its run's actor, and after a restart rebuilds every live run from
the heddle-runs bucket. Heartbeats, the watchdog and the backstop are liveness.py's."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, assert_never

import msgspec
from heddle.services.orchestrator.actor import RunActor
from heddle.services.orchestrator.admission import Admission
from heddle.services.orchestrator.consumers import PartitionConsumers
from heddle.services.orchestrator.decisions import KillAttempt
from heddle.services.orchestrator.effects import EffectRunner, Effects
from heddle.services.orchestrator.handoff import Handoffs
from heddle.services.orchestrator.leases import Leases, member_name
from heddle.services.orchestrator.liveness import Liveness
from heddle.services.orchestrator.messages import (
    Admit,
    Cancel,
    HandedOff,
    Message,
    RetryTimer,
)
from heddle.services.orchestrator.pod_watch import PodWatch, wanted
from heddle.services.orchestrator.state import HandoffAnswer, Policy, RunState
from heddle.services.orchestrator.submissions import Submissions
from heddle.services.orchestrator.workflows import WorkflowFeatures
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.consume import Outcome, too_early_for_good
from heddle.shared.broker.kv_reads import read_current, read_steps
from heddle.shared.broker.nats_io import close, connect_until_ready
from heddle.shared.broker.pull import Handler
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.core.partitions import partition_of, subject_partition
from heddle.shared.core.validation import Limits
from heddle.shared.runtime.metrics import LIVE_RUNS, WAITING_RUNS
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    TERMINAL_RUN,
    CancelRun,
    RetryDue,
    StepEvent,
    StepStarted,
    SubmitRun,
    command_decoder,
    event_decoder,
    run_record_decoder,
)

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket
    from heddle.shared.broker.nats_types import Client, Msg

log = logging.getLogger("heddle.orchestrator")
FINISHED_MEMORY = 50_000


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
        )
        self.limits = Limits(settings.max_steps, settings.max_command_bytes)
        self.actors: dict[str, RunActor] = {}
        self.finished: OrderedDict[str, str] = OrderedDict()  # run -> terminal status
        self.liveness: Liveness | None = None  # from start: it needs the connection
        self.pod_watch: PodWatch | None = None  # in a cluster only (pod_watch.py)
        self.acked: AckedPublisher | None = None
        self.consumers: PartitionConsumers | None = None
        self.leases: Leases | None = None
        self.instance = member_name(settings)
        self._stopping = False
        self.nc: Client | None = None
        self.workflows: WorkflowFeatures | None = None  # history, cron, retention
        self.handoffs: Handoffs | None = None
        self.admission = Admission(settings.max_runs_under_way)
        LIVE_RUNS.set_function(lambda: len(self.actors))  # read at a scrape, never per step
        WAITING_RUNS.set_function(lambda: len(self.admission.waiting))

    # ---- lifecycle ----

    async def start(self) -> None:
        self.nc = await connect_until_ready(
            self.settings,
            f"heddle-orchestrator-{self.instance}",
            on_reconnect=self._reconnected,
            on_disconnect=self._disconnected,
        )
        res = await ensure_resources(self.nc, self.settings)
        # A ready message carries the step's variables: one too large for the server fails
        # its step with a reason instead (RunSteps.ready_message); 1 KiB is left for headers.
        self.policy = dataclasses.replace(
            self.policy, max_ready_bytes=max(self.nc.max_payload - 1024, 1024)
        )
        self.js = res.js
        self.runs_kv: Bucket = res.kv[names.RUNS_BUCKET]
        self.submissions = Submissions(
            self.nc,
            self.js,
            self.runs_kv,
            self.limits,
            self.policy,
            self._spawn,
            self._known,
            self.admission.arrive,
            self._free_place,
        )
        self.liveness = Liveness(self.settings, res, self.actors)
        self.acked = await AckedPublisher(self.nc).start()
        self.handoffs = Handoffs(self.nc, self.settings.assign_timeout, self._handed_off)
        self.leases = Leases(
            res.kv[names.LEASES_BUCKET], self.settings, self.instance, self._take, self._give
        )
        self.effects: Effects = EffectRunner(
            self.nc,
            self.js,
            self.acked,
            local_timer=self._local_timer,
            handoffs=self.handoffs,
            lease=self.leases,  # a holder that stood still writes nothing until renewed
        )
        self.workflows = WorkflowFeatures(self.settings, res, self.actors, self.effects)
        self.effects = self.workflows.effects  # the same runner, also feeding run history
        self.consumers = PartitionConsumers(
            self.nc, self.js, self._guard(self._on_command), self._guard(self._on_event)
        )
        self.liveness.start()
        if wanted(self.settings):
            self.pod_watch = PodWatch(
                self.settings, res.kv[names.PODS_BUCKET], self.liveness.runner_lost
            )
            await self.pod_watch.start()
        await self.leases.start()  # takes this orchestrator's share of the partitions

    def _started(self) -> tuple[PartitionConsumers, Liveness, WorkflowFeatures]:
        """What start() makes, which taking and giving partitions (the leases) need."""
        if self.consumers is None or self.liveness is None or self.workflows is None:
            raise RuntimeError("the orchestrator is not started")
        return self.consumers, self.liveness, self.workflows

    async def _take(self, parts: set[int]) -> None:
        """Partitions just acquired: their live runs rebuilt, then their commands and events
        consumed (what an earlier holder left unacknowledged first)."""
        consumers, liveness, workflows = self._started()
        started = time.monotonic()
        await consumers.bind(parts)
        await self._rebuild(parts)
        # After the rebuild: a heartbeat replayed before its run's actor exists is dropped.
        liveness.watch(parts)
        await consumers.start(parts)
        if 0 in parts:
            await workflows.lead()
        event(
            log,
            "partitions taken",
            partitions=sorted(parts),
            held=len(consumers.held),
            live_runs=len(self.actors),
            took_ms=round((time.monotonic() - started) * 1000),
        )

    async def _give(self, parts: set[int], lost: bool) -> None:
        """Partitions given away (their runs drained within the grace first) or lost (their
        runs dropped at once: another holder may be acting on them)."""
        consumers, liveness, workflows = self._started()
        await consumers.pause(parts)
        if 0 in parts:
            await workflows.follow()
        actors = [a for a in self.actors.values() if self._partition(a.run_id) in parts]
        if not lost:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(a.drain() for a in actors)), self.settings.shutdown_grace
                )
        await asyncio.gather(*(a.stop() for a in actors), return_exceptions=True)
        for actor in actors:
            if self.actors.get(actor.run_id) is actor:
                del self.actors[actor.run_id]
                liveness.forget_run(actor.run_id)
                self.admission.gone(actor.run_id)
        self._admit_due()
        await consumers.stop(parts)
        await liveness.unwatch(parts)

    def _acting_on(self, msg: Msg) -> bool:
        """Whether the message's partition is held here, under a lease still fresh."""
        held = self.consumers is not None and self.consumers.holds(subject_partition(msg.subject))
        return held and self.leases is not None and self.leases.fresh()

    def _partition(self, run_id: str) -> int:
        return partition_of(run_id, self.settings.partitions)

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        if self.pod_watch is not None:
            await self.pod_watch.stop()
        if self.liveness is not None:
            await self.liveness.stop()
        if self.leases is not None:
            await self.leases.stop()  # each run finishes what it took, within the grace
        if self.liveness is not None:
            await self.liveness.stop_watch()
        if self.workflows is not None:
            await self.workflows.stop()
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

    # ---- actors ----

    def _known(self, run_id: str) -> bool:
        """Whether the run is live here or finished lately."""
        return run_id in self.actors or run_id in self.finished

    def _spawn(self, state: RunState) -> RunActor:
        actor = RunActor(state, self.effects, self._actor_done)
        self.actors[actor.run_id] = actor
        actor.start()
        return actor

    def _actor_done(self, actor: RunActor) -> None:
        self.actors.pop(actor.run_id, None)
        if self.liveness is not None:
            self.liveness.forget_run(actor.run_id)
        self._free_place(actor.run_id)
        if actor.duplicate:
            event(log, "duplicate submit", run=actor.run_id)
            return
        if actor.discarded:
            return  # never created: its submit comes again
        self.finished[actor.run_id] = actor.state.run.status
        while len(self.finished) > FINISHED_MEMORY:
            self.finished.popitem(last=False)

    def _free_place(self, run_id: str) -> None:
        """The run ended, or was never made: its place goes to whoever's turn it is."""
        self.admission.gone(run_id)
        self._admit_due()

    def _admit_due(self) -> None:
        """The waiting runs whose turn it is: each one's actor queues its first steps."""
        if self._stopping:
            return  # whoever takes the partitions admits them
        while due := self.admission.due():
            for run_id in due:
                actor = self.actors.get(run_id)
                if actor is not None:
                    actor.post(Admit())
                else:  # not live here any more: its turn passes on
                    self.admission.gone(run_id)

    async def _rebuild(self, parts: set[int]) -> None:
        """Load the partitions' live runs from KV and make each whole (RunState.resume)."""
        runs = [
            run_record_decoder.decode(e.value) for e in await read_current(self.runs_kv, "run.*")
        ]
        live = [
            r
            for r in runs
            if r.status not in TERMINAL_RUN
            and self._partition(r.run_id) in parts
            and r.run_id not in self.actors
        ]
        live.sort(key=lambda r: r.created_at)  # the waiting ones keep their order
        now = time.time()
        for run in live:
            steps = await read_steps(self.runs_kv, run)
            if len(steps) < run.step_count:
                log.error(
                    "run %s has %d of %d step records; leaving it",
                    run.run_id,
                    len(steps),
                    run.step_count,
                )
                continue
            state = RunState(run, steps, self.policy)
            self._spawn(state)  # which counts the running steps as running from now
            self.admission.recovered(run.run_id, run.waiting)
            effects = state.resume(now)
            if effects:
                await self.effects.apply(run.run_id, effects)
        # Once every resumed run's effects are stored: an actor's own writes come after.
        self._admit_due()
        event(log, "rebuilt", partitions=sorted(parts), live_runs=len(live), runs_seen=len(runs))

    # ---- commands and events ----

    def _guard(self, handler: Handler) -> Handler:
        async def guarded(msg: Msg) -> Outcome:
            if self._stopping:
                return Outcome.LEFT  # delivered again to whoever takes the partition
            if not self._acting_on(msg):
                return Outcome.FAILED  # not this orchestrator's to act on now: asked again
            return await handler(msg)

        return guarded

    async def _on_command(self, msg: Msg) -> Outcome:
        try:
            cmd = command_decoder.decode(msg.data)
        except msgspec.DecodeError as exc:
            log.error("dropping undecodable command on %s: %s", msg.subject, exc)
            return Outcome.REFUSED
        if not isinstance(cmd, SubmitRun) and cmd.run_id != names.command_run(msg.subject):
            # The subject decides the partition: a body about another run is not its owner's.
            log.warning("command refused: it names run %r, its subject %s", cmd.run_id, msg.subject)
            return Outcome.REFUSED
        match cmd:
            case SubmitRun(document=None):
                return await self.submissions.submit(cmd, msg)
            case SubmitRun(document=ref):
                assert ref is not None  # the case above
                return await self.submissions.submit_carried(cmd, ref, msg)
            case CancelRun(run_id=run_id):
                # No actor: finished or unknown, and the gateway answered already.
                return self._post(run_id, Cancel(), msg)
            case RetryDue(run_id=run_id, step_id=step_id, attempt=attempt):
                return self._post(run_id, RetryTimer(step_id, attempt), msg)
            case _:
                assert_never(cmd)

    def _post(self, run_id: str, message: Message, msg: Msg) -> Outcome:
        """To the run's actor, which settles ``msg`` once its effects are stored; done at
        once if the run has no actor (finished, or unknown)."""
        actor = self.actors.get(run_id)
        if actor is None:
            return Outcome.DONE
        actor.post(message, msg)
        return Outcome.HELD

    async def _on_event(self, msg: Msg) -> Outcome:
        try:
            ev = event_decoder.decode(msg.data)
        except msgspec.DecodeError as exc:
            log.error("dropping undecodable event on %s: %s", msg.subject, exc)
            return Outcome.REFUSED
        if names.evt_runner(msg.subject) != ev.runner:
            # The server lets a runner publish under its own name alone: the subject is who
            # sent it, the body only what it claims.
            log.warning(
                "event refused: it names runner %r, its subject %s",
                ev.runner,
                msg.subject,
                extra={"fields": {"run": ev.run_id, "step": ev.step_id}},
            )
            return Outcome.REFUSED
        actor = self.actors.get(ev.run_id)
        if actor is not None:
            actor.post(ev, msg)
            return Outcome.HELD
        if ev.run_id in self.finished:
            reason = f"run is already {self.finished[ev.run_id]}"
        elif await self.submissions.stored(ev.run_id) or too_early_for_good(msg):
            reason = "run not live"  # long finished, or never to be created
        else:
            return Outcome.NOT_YET  # not created yet: its submit is being redelivered
        event(log, "ignored", run=ev.run_id, step=ev.step_id, reason=reason)
        await self._fence(ev, reason)
        return Outcome.DONE

    async def _fence(self, ev: StepEvent, reason: str) -> None:
        """A step that started in a run that has ended is told to die. A short step's runner
        is unknown until it reports, so a run cancelled meanwhile could not kill it; a step
        still running at its report delay says where it runs, here."""
        if isinstance(ev, StepStarted):
            kill = KillAttempt(
                ev.runner, ev.step_id, ev.attempt, f"attempt does not count: {reason}", ev.ticket
            )
            await self.effects.apply(ev.run_id, [kill])

    def _handed_off(
        self,
        run_id: str,
        step_id: str,
        attempt: int,
        requeue: int,
        runner: str,
        answer: HandoffAnswer,
    ) -> None:
        actor = self.actors.get(run_id)
        if actor is not None:  # else the run ended, or went to another orchestrator
            actor.post(HandedOff(step_id, attempt, requeue, runner, answer))

    def _local_timer(self, run_id: str, step_id: str, attempt: int, at: float) -> None:
        def fire() -> None:
            actor = self.actors.get(run_id)
            if actor is not None:
                actor.post(RetryTimer(step_id, attempt))

        asyncio.get_running_loop().call_later(max(at - time.time(), 0.0), fire)
