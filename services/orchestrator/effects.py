"""Carries out the state machine's effects over NATS until they are stored.

A batch's writes go out in one pipelined pass (effect_writes.py). A pass that fails is made
again, whole, until one lands: the in-memory state is already ahead of KV, and KV must catch
up before the message that caused it is acknowledged. Around the passes: the transition
notes, written once; the writes held back while this orchestrator's lease is stale; a new
run's creation that was stored although its answer was lost; and the handoffs, offered
once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from heddle.services.orchestrator.decisions import (
    Effect,
    GiveBack,
    LeaveKey,
    PersistRun,
    TakeKey,
    TakeSlots,
    giving_back,
)
from heddle.services.orchestrator.effect_metrics import count
from heddle.services.orchestrator.effect_writes import EffectWrites
from heddle.services.orchestrator.messages import Mailboxes
from heddle.services.orchestrator.notes import transition_notes
from heddle.shared.broker.kv_reads import last_value_matching
from heddle.shared.broker.nats_types import KeyWrongLastSequenceError, NatsError
from heddle.shared.core.namespaces import namespace_of
from heddle.shared.runtime import failpoints
from heddle.shared.wire import names
from heddle.shared.wire.contracts import LogLine, encode

if TYPE_CHECKING:
    from heddle.services.orchestrator.child_runs import ChildRuns
    from heddle.services.orchestrator.handoff import Handoffs
    from heddle.services.orchestrator.keys import ConcurrencyKeys
    from heddle.services.orchestrator.slots import Slots
    from heddle.shared.broker.acked import AckedPublisher
    from heddle.shared.broker.nats_types import Client, JetStreamContext

log = logging.getLogger("heddle.orchestrator")


class WriteLease(Protocol):
    """Whether this orchestrator may write its runs now (services/orchestrator/leases.py)."""

    def fresh(self) -> bool: ...

    async def until_fresh(self) -> None: ...


class Effects(Protocol):
    """What stores a run's effects: the EffectRunner, or one that wraps it (history.py's
    RecordingEffects)."""

    async def apply(
        self, run_id: str, effects: list[Effect], *, create_run: bool = False
    ) -> None: ...


class EffectRunner:
    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        acked: AckedPublisher,
        runs: Mailboxes | None = None,
        handoffs: Handoffs | None = None,
        lease: WriteLease | None = None,
        slots: Slots | None = None,
        keys: ConcurrencyKeys | None = None,
        children: ChildRuns | None = None,
    ) -> None:
        self.nc = nc
        self.js = js
        # Also the local retry timers, and the calls' child runs.
        self.writes = EffectWrites(nc, js, acked, runs, children)
        self.handoffs = handoffs  # sends what Enqueue hands to a runner, and its answer
        # Whether this orchestrator's lease is fresh. A process that stood still past it (a
        # pause) may have lost its runs to another holder: its writes wait until its lease
        # is renewed, or until its runs are dropped for having been lost.
        self.lease = lease
        # The semaphores' slots and the runs' concurrency keys, taken and given back once
        # the records that ask for it are stored (docs/pools.md, "Semaphores", "Concurrency
        # limits").
        self.slots = slots
        self.keys = keys

    async def apply(self, run_id: str, effects: list[Effect], *, create_run: bool = False) -> None:
        if not create_run:
            failpoints.hit("orchestrator.before_writes")
        effects = giving_back(effects)  # a step that ends gives back its slots, however
        await self._until_writable(run_id)
        await self.write_notes(run_id, effects)  # once, not on every retry of the writes
        delay, created, tried = 0.2, create_run, False
        offers = _Once(self._offer, run_id, effects)
        while True:
            await self._until_writable(run_id)
            try:
                await self.writes.once(run_id, effects, create_run, offers)
                count(effects, created)  # once stored: not again if written again
                if self.handoffs is not None:
                    self.handoffs.await_lost(run_id, effects)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # whatever failed, the writes go again: state must reach KV
                if create_run and isinstance(exc, KeyWrongLastSequenceError):
                    mine = await self._created_here(run_id, effects) if tried else False
                    if mine:
                        # An earlier try stored the run and its answer was lost (a server
                        # gone mid-write): the rest of the writes go again, as writes.
                        create_run = False
                        continue
                    if mine is False:
                        raise  # the run exists: stored by an earlier delivery of its submit
                    # Not known whose it is (the record could not be read): asked again.
                tried = True
                log.warning(
                    "writing effects of run %s failed (%s); retrying in %.1fs", run_id, exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        if self.slots is not None and any(isinstance(e, TakeSlots | GiveBack) for e in effects):
            await self._carry_out(self.slots, run_id, effects)
        if self.keys is not None and any(isinstance(e, TakeKey | LeaveKey) for e in effects):
            if any(isinstance(e, LeaveKey) for e in effects):
                failpoints.hit("orchestrator.before_key_given_back")
            await self._carry_out(self.keys, run_id, effects)

    async def _carry_out(
        self, held: Slots | ConcurrencyKeys, run_id: str, effects: list[Effect]
    ) -> None:
        """The batch's takes and give-backs, after its records, done again until they land
        (each may be: a take finds what it holds, a give-back what it gave)."""
        delay = 0.2
        while True:
            await self._until_writable(run_id)
            try:
                await held.carry_out(run_id, effects)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the slots must agree with the records stored
                log.warning(
                    "slots or keys of run %s failed (%s); retrying in %.1fs", run_id, exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _created_here(self, run_id: str, effects: list[Effect]) -> bool | None:
        """Whether the stored run record is the one these effects create; None if it could
        not be read (taking it for another's would leave this run with no actor)."""
        run = next(e.run for e in reversed(effects) if isinstance(e, PersistRun))
        try:
            stored = await last_value_matching(self.js, names.RUNS_BUCKET, names.run_key(run_id))
        except NatsError:
            return None
        return stored == encode(run)

    async def _until_writable(self, run_id: str) -> None:
        lease = self.lease
        if lease is None or lease.fresh():
            return
        log.warning("run %s: its writes wait until this orchestrator's lease is renewed", run_id)
        await lease.until_fresh()

    def _offer(self, run_id: str, effects: list[Effect]) -> None:
        if self.handoffs is not None:
            self.handoffs.offer(run_id, effects)

    async def write_notes(self, run_id: str, effects: list[Effect]) -> None:
        """The batch's transition notes into the steps' logs (see notes.py): core publishes,
        sent ahead of the state writes on the same connection, never awaited, never fatal."""
        try:
            namespace = namespace_of(run_id)
            for note in transition_notes(effects):
                await self.nc.publish(
                    names.log(run_id, note.step_id, note.attempt, namespace, names.NOTES_WRITER),
                    encode(LogLine(stream="heddle", seq=0, text=note.text)),
                )
        except NatsError as exc:
            log.warning("transition notes of run %s not written: %s", run_id, exc)


class _Once:
    """Calls ``fn(*args)`` the first time it is called, never again."""

    def __init__(self, fn: Callable[..., None], *args: object) -> None:
        self._fn: Callable[..., None] | None = fn
        self._args = args

    def __call__(self) -> None:
        fn, self._fn = self._fn, None
        if fn is not None:
            fn(*self._args)
