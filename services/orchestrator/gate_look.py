"""The periodic look at the approval gates the live runs have waiting (docs/approvals.md):
an answer the gateway stored on a gate's record whose DecideApproval was lost (the gateway
gone between the two) is taken from the record, and a record a crash kept unwritten (its
step's record stored, its own not) is written. A run with no gate waiting costs nothing."""

from __future__ import annotations

import logging
import time

import msgspec
from heddle.services.orchestrator.actor import RunActor
from heddle.services.orchestrator.gates import gate_record
from heddle.services.orchestrator.messages import GateDecided
from heddle.shared.broker.nats_types import KeyNotFoundError, KeyWrongLastSequenceError, NatsError
from heddle.shared.broker.resources import Resources
from heddle.shared.runtime.periodic import Periodic
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepRecord, approval_gate_decoder, encode

log = logging.getLogger("heddle.orchestrator")


class GateLook:
    def __init__(self, settings: Settings, res: Resources, actors: dict[str, RunActor]) -> None:
        self.kv = res.kv[names.APPROVALS_BUCKET]
        self.actors = actors  # the orchestrator's own: runs come and go while this runs
        self._periodic = Periodic("gate look", settings.watchdog_scan, self.look, log)
        # By run: whether it has gates at all (a run's steps are known once it is made), so
        # a big run with none is not walked at every look.
        self._gated: dict[str, bool] = {}

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def look(self) -> None:
        gated: dict[str, bool] = {}  # the live runs' only: an ended run's entry goes
        for run_id, actor in list(self.actors.items()):
            known = self._gated.get(run_id)
            steps = actor.state.steps
            gated[run_id] = (
                any(s.approval is not None for s in steps.values()) if known is None else known
            )
            if not gated[run_id]:
                continue
            for step in list(steps.values()):
                if step.status == "waiting" and step.approval is not None:
                    try:
                        await self._check(actor, step)
                    except NatsError as exc:
                        log.warning("gate look: %s not read: %s", step.id, exc)
        self._gated = gated

    async def _check(self, actor: RunActor, step: StepRecord) -> None:
        key = names.approval_key(actor.run_id, step.id)
        try:
            entry = await self.kv.get(key)
        except KeyNotFoundError:
            gate = gate_record(actor.state.run, step, time.time())
            try:
                await self.kv.create(key, encode(gate))
            except KeyWrongLastSequenceError:
                pass  # written meanwhile: looked at next time
            return
        try:
            gate = approval_gate_decoder.decode(entry.value or b"")
        except msgspec.DecodeError:
            return
        if gate.decision is not None and gate.attempt == step.attempt:
            event(log, "gate answer found", run=actor.run_id, step=step.id, by=gate.decision.by)
            actor.post(GateDecided(step.id, gate.attempt, gate.decision))
