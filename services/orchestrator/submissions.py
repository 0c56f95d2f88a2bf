"""A run's submit, as the orchestrator takes it: checked with the gateway's rules, read
from beside the command when it is carried (shared/broker/documents.py), stored once however often
it is delivered, and announced (``heddle.run.stored.<run>``) once its records are written."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import msgspec
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.broker.consume import Outcome
from heddle.shared.broker.documents import DocumentGone, drop_document, read_document
from heddle.shared.broker.nats_types import KeyWrongLastSequenceError, NatsError
from heddle.shared.core.namespaces import namespace_of
from heddle.shared.core.validation import Limits, submit_problems
from heddle.shared.runtime.gc_pause import gc_paused
from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    DocumentRef,
    SubmitRun,
    command_decoder,
    encode,
    run_record_decoder,
)
from heddle.shared.wire.errors import Problem

if TYPE_CHECKING:
    from heddle.services.orchestrator.live_runs import LiveRuns
    from heddle.shared.broker.nats_types import Client, JetStreamContext, KeyValue, Msg

log = logging.getLogger("heddle.orchestrator")


class Submissions:
    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        runs_kv: KeyValue,
        limits: Limits,
        policy: Policy,
        runs: LiveRuns,
    ) -> None:
        self.nc, self.js, self.runs_kv = nc, js, runs_kv
        self.limits, self.policy = limits, policy
        self.runs = runs  # where the new run's actor lives

    async def submit_carried(self, cmd: SubmitRun, ref: DocumentRef, msg: Msg) -> Outcome:
        """A submit whose document is carried beside it (shared/broker/documents.py): read, then
        submitted as if it had come whole; its chunks are purged once the run is stored."""
        run_id = cmd.run_id
        try:
            document = await read_document(self.js, ref)
            with gc_paused():  # a big run's objects are no garbage (shared/runtime/gc_pause.py)
                whole = command_decoder.decode(document)
        except DocumentGone as exc:
            if await self.stored(run_id):  # stored by an earlier delivery, then purged
                event(log, "duplicate submit", run=run_id)
                await self.nc.publish(names.run_stored(run_id), b"")
                return Outcome.DONE
            log.error("submit refused: %s", exc, extra={"fields": {"run": run_id[:100]}})
            return Outcome.REFUSED
        except msgspec.DecodeError as exc:
            log.error("submit refused: document %s: %s", ref.subject, exc)
            await drop_document(self.js, ref)
            return Outcome.REFUSED
        if not isinstance(whole, SubmitRun) or whole.run_id != run_id or whole.document:
            log.error("submit refused: document %s is not run %s's submit", ref.subject, run_id)
            await drop_document(self.js, ref)
            return Outcome.REFUSED
        return await self.submit(whole, msg, ref)

    async def submit(self, cmd: SubmitRun, msg: Msg, ref: DocumentRef | None = None) -> Outcome:
        with gc_paused():
            problems = submit_problems(cmd, self.limits)
        if cmd.run_id != (named := names.command_run(msg.subject)):
            problems.append(Problem("runId", f"is not the run its subject names ({named!r})"))
        if problems:
            # Not through the gateway (which checks the same): refused, never half-created.
            log.warning(
                "submit refused: %s",
                "; ".join(f"{p.path}: {p.message}" for p in problems),
                extra={"fields": {"run": cmd.run_id[:100]}},
            )
            if ref is not None:
                await drop_document(self.js, ref)
            return Outcome.REFUSED
        run_id = cmd.run_id
        if self.runs.known(run_id):  # live here, or ended lately
            event(log, "duplicate submit", run=run_id)
            await self.nc.publish(names.run_stored(run_id), b"")
            if ref is not None:
                await drop_document(self.js, ref)
            return Outcome.DONE
        # Under way at once, or waiting its turn; a run with its namespace's runs-under-way
        # quota or a concurrency key takes those first (keys.py), its turn among the runs
        # under way after. A child run waits for neither its turn nor the quota: its parent
        # holds a place, and would wait on its child for ever (docs/sub-workflows.md).
        child = cmd.parent_run is not None
        quota = not child and self.policy.runs_quota(namespace_of(run_id)) is not None
        keyed = quota or cmd.concurrency_key is not None
        admitted = False if keyed else self.runs.arrive(run_id, cmd.priority, child)
        try:
            with gc_paused():
                state, effects = RunState.new(
                    cmd, self.policy, time.time(), admitted=admitted, runs_quota=quota
                )
            actor = self.runs.spawn(state)
        except BaseException:
            self.runs.free_place(run_id)  # not made after all
            raise
        retried = cmd.retry_of

        async def announce(run_id: str) -> None:
            if retried is not None:
                await self._link_retry(retried, run_id)
            await self._announce(run_id)
            if ref is not None:  # stored: the document is not needed again
                await drop_document(self.js, ref)

        actor.post_init(effects, msg, announce, self.stored)
        return Outcome.HELD

    async def _link_retry(self, retried: str, retry: str) -> None:
        """The retried run names its retry (``retriedBy``). A finished run has no actor, so
        its record is changed here, by compare-and-set; nothing else writes it."""
        key = names.run_key(retried)
        for _ in range(5):
            try:
                entry = await self.runs_kv.get(key)
                if entry.value is None:
                    return  # deleted by retention meanwhile
                run = run_record_decoder.decode(entry.value)
                if run.retried_by is not None:
                    return
                run.retried_by = retry
                await self.runs_kv.update(key, encode(run), last=entry.revision)
                event(log, "run retried", run=retried, retry=retry)
                return
            except KeyWrongLastSequenceError:
                continue
            except Exception as exc:  # the gateway finds the retry by its id all the same
                log.warning("linking %s to its retry %s failed: %s", retried, retry, exc)
                return

    async def _announce(self, run_id: str) -> None:
        event(log, "run stored", run=run_id)
        await self.nc.publish(names.run_stored(run_id), b"")

    async def stored(self, run_id: str) -> bool:
        try:
            entry = await self.runs_kv.get(names.run_key(run_id))
        except NatsError:  # absent (KeyNotFoundError), or the server could not say
            return False
        return entry is not None and entry.value is not None
