"""The run history index: one small summary per run of a named workflow, kept current by
the orchestrator, so ``GET /api/workflows/{name}/runs`` never reads a step.

Keys in heddle-runs:

- ``hist.<workflow>.<run>``: a ``RunSummary`` (status, version, trigger, slot, times and the
  step counts by state), rewritten whenever the run or one of its steps changes state.
- ``last.<workflow>``: the same summary for the workflow's newest run, for the workflow list.

The counts are kept in memory, per live run, from the effects the state machine emits: each
step's last counted state is remembered, so a change costs O(1) however large the run, and a
step written twice in one batch is counted once. Writes leave the run's own path: a single
writer task sends the dirty summaries pipelined, coalescing bursts; only a run's final
summary is awaited (before the message that ended the run is acknowledged).

A crash can still lose a final summary (the run record is stored first); the retention
sweep repairs that at start-up and on every pass (see ``retention.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from heddle.services.orchestrator.decisions import Effect, PersistRun, PersistStep
from heddle.services.orchestrator.effects import EffectRunner
from heddle.services.orchestrator.state import RunState
from heddle.shared.broker.nats_types import KeyNotFoundError
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    TERMINAL_RUN,
    RunRecord,
    RunSummary,
    encode,
    run_summary_decoder,
)

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import JetStreamContext, KeyValue

log = logging.getLogger("heddle.orchestrator.history")
ACK_TIMEOUT = 10.0


def summary_of(run: RunRecord, counts: dict[str, int]) -> RunSummary:
    assert run.registered_workflow is not None
    return RunSummary(
        run_id=run.run_id,
        workflow_name=run.registered_workflow,
        status=run.status,
        created_at=run.created_at,
        step_count=run.step_count,
        counts={k: v for k, v in sorted(counts.items()) if v},
        version=run.version,
        trigger=run.trigger,
        scheduled_for=run.scheduled_for,
        finished_at=run.finished_at,
    )


@dataclass(slots=True)
class Tracked:
    run: RunRecord  # the actor's own record: its status is always current
    known: dict[str, str]  # step -> the state it is counted in
    counts: Counter = field(default_factory=Counter)

    @classmethod
    def of(cls, state: RunState) -> Tracked:
        known: dict[str, str] = {sid: s.status for sid, s in state.steps.items()}
        return cls(state.run, known, Counter(known.values()))

    def move(self, step_id: str, status: str) -> bool:
        old = self.known.get(step_id)
        if old == status:
            return False
        if old is not None:
            self.counts[old] -= 1
        self.counts[status] += 1
        self.known[step_id] = status
        return True

    def summary(self) -> RunSummary:
        return summary_of(self.run, self.counts)


class RunHistory:
    def __init__(
        self, js: JetStreamContext, runs_kv: KeyValue, lookup: Callable[[str], RunState | None]
    ) -> None:
        self.js = js
        self.runs_kv = runs_kv
        self._lookup = lookup
        self._runs: dict[str, Tracked] = {}
        self._dirty: dict[str, Tracked] = {}
        self._final: dict[str, asyncio.Future[None]] = {}
        self._newest: dict[str, tuple[str, str]] = {}  # workflow -> (created_at, run id)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()  # set while nothing waits to be written
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._writer(), name="history-writer")

    async def stop(self, grace: float = 2.0) -> None:
        """Write what is pending (within ``grace``), then stop."""
        if self._task is None:
            return
        if self._dirty or self._final:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace)
        await cancel_and_wait(self._task)
        for fut in self._final.values():
            if not fut.done():
                fut.cancel()

    # ---- fed by the effect runner ----

    async def observe(self, run_id: str, effects: list[Effect]) -> None:
        """A batch of effects was stored: count its step changes and schedule a write."""
        if not any(isinstance(eff, PersistStep | PersistRun) for eff in effects):
            return  # nothing changed state (a fence, an ignored late event, a re-enqueue)
        tracked = self._runs.get(run_id)
        if tracked is None:
            state = self._lookup(run_id)
            if state is None or state.run.registered_workflow is None:
                return
            tracked = self._runs[run_id] = Tracked.of(state)  # counts as they are now
            changed = True
        else:
            changed = False
            for eff in effects:
                if isinstance(eff, PersistStep):
                    changed |= tracked.move(eff.step.id, eff.step.status)
                elif isinstance(eff, PersistRun):
                    changed = True
        if not changed:
            return
        self._dirty[run_id] = tracked
        self._idle.clear()
        self._wake.set()
        if tracked.run.status in TERMINAL_RUN:
            del self._runs[run_id]
            fut = self._final.setdefault(run_id, asyncio.get_running_loop().create_future())
            await fut

    # ---- the writer ----

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._dirty = self._dirty, {}
            if not batch:
                continue
            try:
                await self._write(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop must outlive any failure: the batch is kept
                log.warning("writing run history failed (%s); retrying", exc)
                for run_id, tracked in batch.items():
                    self._dirty.setdefault(run_id, tracked)
                await asyncio.sleep(0.5)
                self._wake.set()
                continue
            for run_id in batch:
                if run_id not in self._dirty:  # not changed again meanwhile: what was written
                    fut = self._final.pop(run_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(None)
            if not self._dirty:
                self._idle.set()

    async def _write(self, batch: dict[str, Tracked]) -> None:
        futures = []
        for run_id, tracked in batch.items():
            summary = tracked.summary()
            data = encode(summary)
            wf = summary.workflow_name
            futures.append(
                await self.js.publish_async(
                    names.kv_subject(names.RUNS_BUCKET, names.hist_key(wf, run_id)), data
                )
            )
            if await self._is_newest(summary):
                futures.append(
                    await self.js.publish_async(
                        names.kv_subject(names.RUNS_BUCKET, names.last_run_key(wf)), data
                    )
                )
        done, pending = await asyncio.wait(futures, timeout=ACK_TIMEOUT)
        for fut in pending:
            fut.cancel()
        if pending:
            raise TimeoutError(f"{len(pending)} history writes unacknowledged")
        for fut in done:
            fut.result()

    async def _is_newest(self, summary: RunSummary) -> bool:
        wf = summary.workflow_name
        if wf not in self._newest:
            newest = ("", "")
            with contextlib.suppress(KeyNotFoundError):
                entry = await self.runs_kv.get(names.last_run_key(wf))
                if entry.value:
                    last = run_summary_decoder.decode(entry.value)
                    newest = (last.created_at, last.run_id)
            self._newest.setdefault(wf, newest)
        mine = (summary.created_at, summary.run_id)
        if mine >= self._newest[wf]:
            self._newest[wf] = mine
            return True
        return False


class RecordingEffects:
    """Wraps the orchestrator's effect runner: after each batch is stored, the history index
    hears of it. Everything else is the wrapped runner's own."""

    def __init__(self, inner: EffectRunner, history: RunHistory) -> None:
        self.inner = inner
        self.history = history

    async def apply(self, run_id: str, effects: list[Effect], *, create_run: bool = False) -> None:
        await self.inner.apply(run_id, effects, create_run=create_run)
        await self.history.observe(run_id, effects)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
