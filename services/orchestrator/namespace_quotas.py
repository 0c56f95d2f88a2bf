"""The namespaces' quotas as this orchestrator knows them (docs/namespaces.md, "Quotas"): every
record of heddle-namespaces in memory, kept by a watch, so that a step or a run of a namespace
without a quota costs a look in a dict and nothing more.

A record changed, its running-steps quota's semaphore and its runs-under-way quota's key are
sized anew (by compare-and-set: every orchestrator does it, the first alone writes): a quota
raised or gone lets the steps or runs waiting in it go ahead through the semaphores' or the
keys' own watch."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from heddle.shared.broker.concurrency_store import KEYS
from heddle.shared.broker.kv_watch import follow
from heddle.shared.broker.namespace_store import NAMESPACES
from heddle.shared.broker.semaphore_store import SEMAPHORES
from heddle.shared.core import concurrency, quotas, semaphores
from heddle.shared.runtime.service import event
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire.contracts import NamespaceRecord

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket

log = logging.getLogger("heddle.orchestrator")


class NamespaceQuotas:
    def __init__(self, kv: Bucket, semaphores_kv: Bucket, keys_kv: Bucket) -> None:
        self.kv = kv
        self.semaphores_kv = semaphores_kv
        self.keys_kv = keys_kv  # heddle-concurrency: the runs-under-way quotas' keys
        self.records: dict[str, NamespaceRecord] = {}
        self._caught_up = asyncio.Event()
        self._watch: asyncio.Task | None = None

    def running_steps(self, namespace: str) -> int | None:
        """The namespace's running-steps quota (None: none)."""
        rec = self.records.get(namespace)
        return None if rec is None else rec.max_running_steps

    def runs_under_way(self, namespace: str) -> int | None:
        """The namespace's runs-under-way quota (None: none)."""
        rec = self.records.get(namespace)
        return None if rec is None else rec.max_runs_under_way

    async def start(self) -> None:
        """The watch started, and every record read before a run is taken."""
        self._watch = asyncio.create_task(
            follow(
                self.kv,
                self._changed,
                what="namespaces",
                log=log,
                on_caught_up=self._caught_up.set,
            ),
            name="namespaces watch",
        )
        await self._caught_up.wait()

    async def stop(self) -> None:
        await cancel_and_wait(self._watch)

    async def _changed(self, entry: object) -> None:
        name = str(getattr(entry, "key", ""))
        rec = NAMESPACES.decoded(getattr(entry, "value", None))
        if rec.name != name:  # deleted, or not a record
            rec = NamespaceRecord(name=name)
        self.records[name] = rec
        await self._size(name, rec)

    async def _size(self, name: str, rec: NamespaceRecord) -> None:
        """The quotas' documents sized as the record says; none made for a quota never set."""
        sem_name, steps = quotas.steps_semaphore(name), quotas.size(rec.max_running_steps)
        if (
            rec.max_running_steps is not None
            or (await SEMAPHORES.read(self.semaphores_kv, sem_name))[1]
        ):
            await SEMAPHORES.change(
                self.semaphores_kv, sem_name, lambda s: semaphores.resize(s, steps)
            )
        key_name, runs = quotas.runs_key(name), quotas.size(rec.max_runs_under_way)
        if rec.max_runs_under_way is not None or (await KEYS.read(self.keys_kv, key_name))[1]:
            await KEYS.change(
                self.keys_kv, key_name, lambda d: concurrency.resized(d, key_name, runs)
            )
        event(
            log,
            "namespace quotas",
            namespace=name,
            max_runs_under_way=rec.max_runs_under_way,
            max_running_steps=rec.max_running_steps,
        )
