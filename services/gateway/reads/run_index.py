"""The runs list's index: every run record of heddle-runs in memory, newest first, kept up
to date by one ordered consumer on ``run.*``, so ``GET /api/runs`` costs the runs it shows,
not a replay of every record kept, which the web page would ask for every 2 s.

Start: the consumer is created first (new messages only), then the current records are read
in one replay (``read_current``), then what the consumer delivered meanwhile is applied on
top: a record replaces another only if it was stored later (stream sequence), so the order
of the two does not matter. A deleted key (a run removed by retention) leaves the index.

``caught_up`` makes a list exact as of its request: it asks the server how many records the
consumer has not delivered yet and the stream sequence of the last it delivered, and waits
(briefly) until none is pending and that one has been applied here. A count of messages in
the subscription's queue would miss one still on the wire. If the consumer is lost (a
reconnect the client could not resume), the index is rebuilt the same way.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.broker.nats_types import DeliverPolicy, NatsError
from heddle.shared.core.namespaces import in_namespaces, namespace_of
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunRecord, run_record_decoder

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket
    from heddle.shared.broker.nats_types import ConsumerInfo, JetStreamContext, Msg

log = logging.getLogger("heddle.gateway")
CATCH_UP_WAIT = 2.0  # seconds a list waits at most for records stored before it was asked
RUN_PREFIX = names.kv_subject(names.RUNS_BUCKET, names.run_key(""))


class RunList:
    """Run records by recency (``createdAt``, then run id), with a count per status. No I/O."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[int, RunRecord]] = {}  # run id -> (stream sequence, record)
        self._order: list[tuple[str, str]] = []  # (created_at, run id), oldest first
        self._statuses: Counter[str] = Counter()
        self._of_namespace: dict[str, Counter[str]] = {}  # statuses of each namespace's runs
        # The same order per registered workflow, for its recent runs (the workflow list).
        self._of_workflow: dict[str, list[tuple[str, str]]] = {}
        self._waiting: set[str] = set()  # runs waiting for their turn (RunRecord.waiting)

    def put(self, seq: int, run: RunRecord) -> None:
        """A record stored at stream sequence ``seq``; an older one than held is ignored."""
        held = self._runs.get(run.run_id)
        if held is not None:
            if held[0] >= seq:
                return
            self._forget(held[1])
        self._runs[run.run_id] = (seq, run)
        bisect.insort(self._order, (run.created_at, run.run_id))
        self._statuses[run.status] += 1
        self._of_namespace.setdefault(namespace_of(run.run_id), Counter())[run.status] += 1
        if run.waiting:
            self._waiting.add(run.run_id)
        workflow = run.registered_workflow
        if workflow is not None:
            bisect.insort(self._of_workflow.setdefault(workflow, []), (run.created_at, run.run_id))

    def remove(self, run_id: str, seq: int) -> None:
        """The key was deleted at stream sequence ``seq``."""
        held = self._runs.get(run_id)
        if held is not None and held[0] < seq:
            del self._runs[run_id]
            self._forget(held[1])

    def newest(
        self, limit: int, status: str | None = None, namespaces: Iterable[str] | None = None
    ) -> list[RunRecord]:
        """The newest runs, of ``status`` and in ``namespaces`` (None: any) if given."""
        out: list[RunRecord] = []
        kept = None if namespaces is None else set(namespaces)
        for _, run_id in reversed(self._order):
            run = self._runs[run_id][1]
            if (status is None or run.status == status) and in_namespaces(run_id, kept):
                out.append(run)
                if len(out) == limit:
                    break
        return out

    def newest_of(self, workflow: str, limit: int) -> list[RunRecord]:
        """The newest runs of a registered workflow, newest first: O(limit)."""
        order = self._of_workflow.get(workflow, [])
        return [self._runs[run_id][1] for _, run_id in reversed(order[-limit:])]

    def higher_priority_ahead(self, run: RunRecord) -> int:
        """How many waiting runs have a higher priority than ``run``: O(waiting runs)."""
        return sum(1 for r in self._waiting if self._runs[r][1].priority > run.priority)

    @property
    def total(self) -> int:
        return len(self._runs)

    def matching(self, status: str | None) -> int:
        return self.total if status is None else self._statuses[status]

    def count(self, status: str | None, namespaces: Iterable[str] | None) -> int:
        """How many runs are in ``status`` (None: any) and in ``namespaces`` (None: any)."""
        if namespaces is None:
            return self.matching(status)
        found = [self._of_namespace.get(ns, Counter()) for ns in set(namespaces)]
        return sum(c.total() if status is None else c[status] for c in found)

    def _forget(self, run: RunRecord) -> None:
        _drop(self._order, (run.created_at, run.run_id))
        self._waiting.discard(run.run_id)
        workflow = run.registered_workflow
        if workflow is not None and workflow in self._of_workflow:
            _drop(self._of_workflow[workflow], (run.created_at, run.run_id))
            if not self._of_workflow[workflow]:
                del self._of_workflow[workflow]
        self._statuses[run.status] -= 1
        self._of_namespace[namespace_of(run.run_id)][run.status] -= 1


def _delivered(info: ConsumerInfo) -> int:
    """The stream sequence a consumer delivered last (a new one: the stream's last)."""
    return (info.delivered.stream_seq or 0) if info.delivered is not None else 0


def _drop(order: list[tuple[str, str]], key: tuple[str, str]) -> None:
    i = bisect.bisect_left(order, key)
    if i < len(order) and order[i] == key:
        del order[i]


class RunIndex:
    def __init__(self, js: JetStreamContext, runs_kv: Bucket) -> None:
        self._js = js
        self._kv = runs_kv
        self.runs = RunList()
        self._sub: JetStreamContext.PushSubscription | None = None  # while the feed runs
        self._received = 0  # stream sequence of the last update applied (or the start point)
        self._ready = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._keep(), name="run-index")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await self._unsubscribe()

    async def caught_up(self) -> RunList:
        """The index, with every record stored before this call in it (or after waiting
        ``CATCH_UP_WAIT`` for them, the index as it is)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CATCH_UP_WAIT
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), CATCH_UP_WAIT)
        while self._ready.is_set() and self._sub is not None and loop.time() < deadline:
            try:
                info = await self._sub.consumer_info()
            except NatsError:
                break  # being re-created: serve what there is
            if info.num_pending == 0 and self._received >= _delivered(info):
                break
            await asyncio.sleep(0.002)
        return self.runs

    async def _keep(self) -> None:
        while True:
            try:
                await self._build()
                await self._watch_consumer()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the index outlives any failure: it is built again
                log.warning("run index lost its feed (%s); rebuilding", exc)
            self._ready.clear()
            await self._unsubscribe()
            await asyncio.sleep(0.5)

    async def _build(self) -> None:
        fresh = RunList()
        early: list[Msg] = []
        feed = early.append  # until the replay is in, updates wait here

        async def on_msg(msg: Msg) -> None:
            feed(msg)
            self._received = max(self._received, msg.metadata.sequence.stream)

        self._received = 0
        self._sub = sub = await self._js.subscribe(
            RUN_PREFIX + "*", cb=on_msg, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW
        )
        # A new consumer reports the stream's last sequence as delivered: its start point.
        start = _delivered(await sub.consumer_info())
        self._received = max(self._received, start)
        for entry in await read_current(self._kv, names.run_key("*")):
            with contextlib.suppress(msgspec.DecodeError):
                fresh.put(entry.revision or 0, run_record_decoder.decode(entry.value))
        for msg in early:
            _apply(fresh, msg)
        early.clear()
        self.runs = fresh
        feed = lambda msg: _apply(self.runs, msg)  # noqa: E731 (rebinding the closure's feed)
        self._ready.set()

    async def _watch_consumer(self) -> None:
        # The ordered consumer resumes by itself after a reconnect; if it is gone for good
        # (the server lost it), its info fails and the index is rebuilt.
        while True:
            await asyncio.sleep(30)
            assert self._sub is not None
            await self._sub.consumer_info()

    async def _unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


def _apply(runs: RunList, msg: Msg) -> None:
    run_id = msg.subject[len(RUN_PREFIX) :]
    seq = msg.metadata.sequence.stream
    operation = (msg.headers or {}).get("KV-Operation")
    if operation in ("DEL", "PURGE") or not msg.data:
        runs.remove(run_id, seq)
        return
    with contextlib.suppress(msgspec.DecodeError):
        runs.put(seq, run_record_decoder.decode(msg.data))
