"""The concurrency keys of this orchestrator's runs, in heddle-concurrency (docs/pools.md,
"Concurrency limits"): the effect runner's takes and give-backs (``TakeKey``, ``LeaveKey``),
the answer of a take posted to its run's actor, with the cancels it calls for; the watch
that tells a queued run its turn has come; and, when partitions are taken, the holders made
to agree with the rebuilt runs.

Only the holder of a run's partition changes that run's entries, as with the semaphores'
(slots.py): the takes and give-backs are its actors' effects, and a rebuild reconciles the
entries of the partitions taken alone.

A namespace's runs-under-way quota is a key of the same kind, kept under its own name
(quotas.runs_key: no sha256 name a user's key has holds ``==``) and sized by the
namespace's record (namespace_quotas.py), not by the runs that take it."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from heddle.services.orchestrator.decisions import Effect, LeaveKey, TakeKey
from heddle.services.orchestrator.messages import KeyFree, KeyHolders, KeyTaken
from heddle.shared.broker.concurrency_store import KEYS
from heddle.shared.broker.kv_watch import follow
from heddle.shared.core import concurrency, quotas
from heddle.shared.core.concurrency import Verdict, document_name
from heddle.shared.core.namespaces import namespace_of
from heddle.shared.runtime.service import event
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire import names
from heddle.shared.wire.contracts import TERMINAL_RUN, CancelRun, ConcurrencyKey, encode
from heddle.shared.wire.timefmt import now_rfc3339

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket
    from heddle.shared.broker.nats_types import JetStreamContext
    from heddle.shared.wire.contracts import RunRecord

log = logging.getLogger("heddle.orchestrator")


def cancel_reason(by: str, key: str) -> str:
    """The reason of a run cancelled to make room for ``by`` (``onLimit: cancelRunning``)."""
    return f"cancelled for run {by}: concurrency key {key} (onLimit cancelRunning)"


class ConcurrencyKeys:
    def __init__(
        self,
        kv: Bucket,
        js: JetStreamContext,
        runs: KeyHolders,
        runs_quota: Callable[[str], int | None] = lambda namespace: None,
    ) -> None:
        self.kv = kv
        self.js = js  # the cancels, sent as commands: the run may be another's
        self.runs = runs
        self.runs_quota = runs_quota  # a namespace's runs-under-way quota: its key's limit
        self._watch: asyncio.Task | None = None

    # ---- the effects ----

    async def carry_out(self, run_id: str, effects: list[Effect]) -> None:
        """The batch's takes and give-backs, in order (each may be done again: a take finds
        what it holds or where it waits, a give-back what it gave)."""
        for eff in effects:
            if isinstance(eff, TakeKey):
                await self._take(run_id, eff)
            elif isinstance(eff, LeaveKey):
                name = eff.key if eff.quota else document_name(eff.key)
                await KEYS.change(self.kv, name, lambda d: concurrency.give_back(d, run_id))
                event(log, "concurrency key given back", run=run_id, key=eff.key)

    def _quota_limit(self, name: str) -> int:
        """The limit of a quota's key: its namespace's quota as this orchestrator knows it."""
        return quotas.size(self.runs_quota(quotas.quota_namespace(name) or ""))

    async def _take(self, run_id: str, eff: TakeKey) -> None:
        verdicts: list[Verdict] = []
        limit = self._quota_limit(eff.key) if eff.quota else eff.limit

        def taking(doc: ConcurrencyKey) -> ConcurrencyKey:
            new, verdict = concurrency.take(doc, run_id, eff.key, limit, eff.on_limit)
            verdicts.append(verdict)
            return new

        await KEYS.change(self.kv, eff.key if eff.quota else document_name(eff.key), taking)
        verdict = verdicts[-1]
        for victim in verdict.cancel:  # sent again on every take: a lost one is sent anew
            await self._cancel(victim, run_id, eff.key)
        admitted = verdict.holds and eff.admits and self.runs.key_held(run_id, eff.priority)
        event(
            log,
            "concurrency key "
            + ("taken" if verdict.holds else "refused" if verdict.refused else "queued for"),
            run=run_id,
            key=eff.key,
            holder=verdict.holder,
            cancelled=list(verdict.cancel) or None,
        )
        self.runs.post(
            run_id, KeyTaken(verdict.holds, verdict.holder, verdict.refused, admitted, eff.quota)
        )

    async def _cancel(self, victim: str, by: str, key: str) -> None:
        """``victim`` cancelled for ``by``, by the command a person's cancel sends: its
        partition's holder cancels it."""
        cmd = CancelRun(run_id=victim, requested_at=now_rfc3339(), reason=cancel_reason(by, key))
        await self.js.publish(
            names.cmd_cancel(victim),
            encode(cmd),
            headers={"Nats-Msg-Id": names.key_cancel_msg_id(victim, by)},
        )

    # ---- the watch ----

    def start(self) -> None:
        self._watch = asyncio.create_task(
            follow(self.kv, self._changed, what="concurrency keys", log=log, on_caught_up=_nothing),
            name="concurrency keys watch",
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._watch)

    async def _changed(self, entry: object) -> None:
        """A key changed: each queued run whose turn has come, if it is live here, asks
        again (runs elsewhere are their orchestrators' to tell)."""
        doc = KEYS.decoded(getattr(entry, "value", None))
        for run_id in concurrency.due(doc):
            self.runs.post(run_id, KeyFree())

    # ---- a rebuild ----

    async def reconcile(self, owned: Callable[[str], bool], runs: Iterable[RunRecord]) -> None:
        """Every key made to agree with the runs of the partitions just taken (``owned``):
        runs ended given back, runs holding a key by their record holding it, runs waiting
        for one kept in their places (or asking again, when they resume)."""
        holding: dict[str, set[str]] = defaultdict(set)
        queued: dict[str, set[str]] = defaultdict(set)
        made: dict[str, ConcurrencyKey] = {}  # each key's document, to make if it is gone
        for run in runs:
            if run.status in TERMINAL_RUN:
                continue
            for name, doc, waits in self._keys_of(run):
                made.setdefault(name, doc)
                (queued if waits else holding)[name].add(run.run_id)
        stored = await KEYS.read_all(self.kv)
        for name in sorted(set(stored) | set(made)):
            fixed = await KEYS.change(
                self.kv, name, _reconciling(owned, holding[name], queued[name], made.get(name))
            )
            event(log, "concurrency key reconciled", key=fixed.key, holders=len(fixed.holders))

    def _keys_of(self, run: RunRecord) -> list[tuple[str, ConcurrencyKey, bool]]:
        """The keys a live run has taken, by document name: each with the document to make
        if it is gone, and whether the run waits for it. Its namespace's quota is not taken
        while it waits for its own key."""
        out: list[tuple[str, ConcurrencyKey, bool]] = []
        key = run.concurrency_key
        if key is not None:
            doc = ConcurrencyKey(key=key, limit=run.concurrency_limit)
            out.append((document_name(key), doc, run.concurrency_wait is not None))
        if run.runs_quota and (key is None or run.concurrency_wait is None):
            name = quotas.runs_key(namespace_of(run.run_id))
            quota = ConcurrencyKey(key=name, limit=self._quota_limit(name))
            out.append((name, quota, run.quota_wait))
        return out


def _nothing() -> None:
    pass


def _reconciling(
    owned: Callable[[str], bool], holding: set[str], queued: set[str], made: ConcurrencyKey | None
) -> Callable[[ConcurrencyKey], ConcurrencyKey]:
    def fn(doc: ConcurrencyKey) -> ConcurrencyKey:
        if not doc.key and made is not None:
            doc = made
        # Sorted: the holders a key lost come back in the order they were made.
        return concurrency.reconcile(doc, owned, holding, queued, sorted(holding))

    return fn
