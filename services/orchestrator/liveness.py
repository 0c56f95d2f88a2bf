"""How the orchestrator learns that a step's runner is gone, and acts on it.

Nothing tells the orchestrator that a runner died or that a broker lost a ready message:
it has to notice. Heartbeats arrive through a watch on heddle-heartbeats into the
watchdog's view; two periodic jobs turn what that view (and the stream) shows into
messages for the runs: the watchdog's scan gives silence its verdict, and the backstop's
look finds queued attempts nobody holds. ``watchdog.py`` and ``backstop.py`` decide; this
module holds their I/O and their timing, apart from ``routing.py``, which routes commands
and events.

Its one rule: no verdict, and no look, until the watch has replayed the current
heartbeats. A view that is behind (just started, just reconnected, a slow replay) would see
silence that is not there.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
from heddle.services.orchestrator.actor import RunActor
from heddle.services.orchestrator.backstop import Backstop
from heddle.services.orchestrator.messages import Heard, Lost, Silent
from heddle.services.orchestrator.stored import ready_steps, stored_outcome
from heddle.services.orchestrator.watchdog import HeartbeatView
from heddle.shared.broker.kv_reads import stored_at
from heddle.shared.broker.kv_watch import follow
from heddle.shared.broker.nats_types import KeyValue
from heddle.shared.broker.resources import Resources
from heddle.shared.runtime.metrics import VERDICTS
from heddle.shared.runtime.periodic import Periodic
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire import names
from heddle.shared.wire.contracts import heartbeat_decoder
from heddle.shared.wire.errors import OutcomeUnknown
from heddle.shared.wire.timefmt import from_epoch

log = logging.getLogger("heddle.orchestrator")  # its lines are the orchestrator's, like stored.py's


class Liveness:
    """The heartbeat watch, the watchdog's scan and the backstop's look of one orchestrator.

    The watch (``watch`` / ``stop_watch``) runs from the rebuild to the very end, so the
    view is current before anything is judged and stays current while the runs drain. The
    scan and the look (``start`` / ``stop``) run only while commands and events flow: a
    run that is draining for shutdown gets no verdict.
    """

    def __init__(self, settings: Settings, res: Resources, actors: dict[str, RunActor]) -> None:
        self.settings = settings
        self.js = res.js
        self.hb_kv = res.kv[names.HEARTBEATS_BUCKET]
        self.actors = actors  # the orchestrator's own: runs come and go while this runs
        self.view = HeartbeatView(settings.silence_limit, settings.kill_grace)
        self.backstop = Backstop(
            settings.silence_limit, lambda run_id: ready_steps(self.js, run_id)
        )
        self._periodic: list[Periodic] = []  # the watchdog's scan, the backstop's look
        self._watches: dict[int, asyncio.Task[None]] = {}  # partition -> its heartbeat watch
        self._caught_up: set[int] = set()
        self._online = True  # the connection is up (disconnected / reconnected)

    # ---- lifecycle ----

    def watch(self, parts: set[int]) -> None:
        """Start the heartbeat watch of each partition, or start it again from a fresh
        replay. No verdict at all until every watch has replayed (then a full grace from
        now): a rare pause (a partition taken, a reconnect) for a simple rule."""
        if parts:
            self.view.disconnected()  # now, not when the first watch task gets to run
        for p in parts:
            self._caught_up.discard(p)
            old = self._watches.pop(p, None)
            if old is not None:
                old.cancel()
            self._watches[p] = asyncio.create_task(self._watch_heartbeats(p), name=f"hb-{p}")

    async def unwatch(self, parts: set[int]) -> None:
        for p in parts:
            await cancel_and_wait(self._watches.pop(p, None))
            self._caught_up.discard(p)
        # A watch stopped before it replayed must not hold verdicts back for the others.
        self._resume_if_caught_up()

    def _resume_if_caught_up(self) -> None:
        if self._online and not self.view.connected and self._caught_up >= set(self._watches):
            self.view.reconnected()

    def start(self) -> None:
        self._periodic = [
            Periodic("watchdog scan", self.settings.watchdog_scan, self.scan, log),
            Periodic("backstop look", self.backstop.tracker.period, self.look, log),
        ]
        for job in self._periodic:
            job.start()

    async def stop(self) -> None:
        for job in self._periodic:
            await job.stop()

    async def stop_watch(self) -> None:
        await self.unwatch(set(self._watches))

    def disconnected(self) -> None:
        self._online = False
        self.view.disconnected()

    def reconnected(self) -> None:
        # The heartbeat watches restart and resume the watchdog once they have caught up.
        self._online = True
        self.watch(set(self._watches))

    def forget_run(self, run_id: str) -> None:
        self.view.forget_run(run_id)
        self.backstop.tracker.forget_run(run_id)

    # ---- heartbeats ----

    async def _watch_heartbeats(self, partition: int) -> None:
        # No verdicts until the watches have replayed the current heartbeats: a view that
        # is behind (just started, just reconnected, a slow replay) would see silence that
        # is not there. Caught up, every attempt gets a full grace from now.
        def restarting() -> None:
            self._caught_up.discard(partition)
            self.view.disconnected()

        def caught_up() -> None:
            self._caught_up.add(partition)
            self._resume_if_caught_up()

        await follow(
            self.hb_kv,
            self._heard,
            what="heartbeat",
            log=log,
            on_caught_up=caught_up,
            on_restart=restarting,
            ignore_deletes=True,
            keys=names.heartbeats_of_partition(partition),
        )

    async def _heard(self, entry: KeyValue.Entry) -> None:
        value = entry.value
        if value is not None:
            self._on_heartbeat(entry, value)

    def _on_heartbeat(self, entry: KeyValue.Entry, value: bytes) -> None:
        try:
            hb = heartbeat_decoder.decode(value)
        except msgspec.DecodeError:
            return
        actor = self.actors.get(hb.run_id)
        if actor is None:
            return
        step = actor.state.steps.get(hb.step_id)
        published = entry.key.rsplit(".", 1)[0]  # less the partition the bucket appended
        if published != names.heartbeat_key(hb.run_id, hb.step_id, hb.runner) or (
            step is not None and not actor.state.holds_ticket(step, hb.ticket)
        ):
            # Another runner's key, or not the attempt's ticket: not from its runner.
            log.warning(
                "heartbeat ignored: not from the attempt's runner",
                extra={"fields": {"key": entry.key, "runner": hb.runner}},
            )
            return
        stored = stored_at(entry) or 0.0
        self.view.record(hb, stored)
        # What the run makes of it (the step's last heartbeat, a queued attempt's runner)
        # is its actor's to decide.
        actor.post(Heard(hb.step_id, hb.attempt, hb.runner, _stamp(stored)))

    # ---- the watchdog's scan and the backstop's look ----

    async def scan(self) -> None:
        for actor in list(self.actors.values()):
            for verdict in self.view.verdicts(actor.state, actor.running_since):
                await self._give(actor, verdict, "silent")

    async def runner_lost(self, runner: str, reason: str) -> None:
        """A verdict from outside the heartbeats: the pod watch saw ``runner``'s pod go
        (services/orchestrator/pod_watch.py). Every attempt it holds, running or accepted,
        fails now, as a silent runner's does: retried at once if it has tries left. The
        watchdog's scan never judges such an attempt again; one the pod watch did not see
        stays the scan's."""
        for actor in list(self.actors.values()):
            beats = self.view.beats.get(actor.run_id, {})
            for step in list(actor.state.steps.values()):
                if step.status not in ("queued", "running"):
                    continue
                beat = beats.get(step.id)
                held = step.runner == runner or (
                    step.runner is None
                    and beat is not None
                    and beat.runner == runner
                    and beat.attempt == step.attempt
                )
                if not held or not self.view.give(actor.run_id, step.id, step.attempt):
                    continue
                await self._give(actor, Silent(step.id, step.attempt, reason), "pod")

    async def _give(self, actor: RunActor, verdict: Silent, kind: str) -> None:
        """Post a verdict to its run, unless the attempt's outcome is stored after all."""
        # If the runner reported before it went quiet, its outcome is stored and waits in
        # this service's backlog (a restart, or a busy moment).
        step = actor.state.steps.get(verdict.step_id)
        runner = step.runner if step is not None else None
        ticket = step.ticket if step is not None else ""
        try:
            outcome = await stored_outcome(
                self.js, actor.run_id, verdict.step_id, verdict.attempt, runner, ticket
            )
        except OutcomeUnknown as exc:
            # Not knowing is not "none": judged again at the next scan.
            self.view.withdraw(actor.run_id, verdict.step_id, verdict.attempt)
            _postponed("watchdog verdict", actor.run_id, verdict.step_id, verdict.attempt, exc)
            return
        VERDICTS.labels(kind if outcome is None else "withdrawn").inc()
        event(
            log,
            "watchdog verdict" if outcome is None else "watchdog verdict withdrawn",
            run=actor.run_id,
            step=verdict.step_id,
            attempt=verdict.attempt,
            reason=verdict.reason if outcome is None else "its outcome is stored",
        )
        actor.post(verdict if outcome is None else outcome)

    async def look(self) -> None:
        """Queued attempts nobody holds (services/orchestrator/backstop.py)."""
        if not self.view.connected:
            self.backstop.tracker.reset()  # an outage, or a watch still catching up
            return
        states = [a.state for a in list(self.actors.values())]
        findings = await self.backstop.check(states, self.view.beats, time.monotonic())
        for f in findings:
            actor = self.actors.get(f.run_id)
            if actor is None:
                continue
            try:
                step = actor.state.steps.get(f.step_id)
                ticket = step.ticket if step is not None else ""
                outcome = await stored_outcome(
                    self.js, f.run_id, f.step_id, f.attempt, None, ticket
                )
            except OutcomeUnknown as exc:  # still missing at the next look: found again
                _postponed("lost attempt check", f.run_id, f.step_id, f.attempt, exc)
                continue
            event(
                log,
                "lost attempt",
                run=f.run_id,
                step=f.step_id,
                attempt=f.attempt,
                action="queue it again" if outcome is None else "apply its stored outcome",
            )
            actor.post(outcome or Lost(f.step_id, f.attempt, f.requeues))


def _postponed(what: str, run_id: str, step_id: str, attempt: int, exc: OutcomeUnknown) -> None:
    event(log, f"{what} postponed", run=run_id, step=step_id, attempt=attempt, reason=str(exc))


def _stamp(epoch: float) -> str | None:
    return from_epoch(epoch) if epoch else None
