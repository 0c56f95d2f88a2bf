"""What the gateway keeps of finished runs, whose steps change no more: their step records, for
the steps in pages (``GET /api/runs/{run}/steps``), and their step states, for the grid
(``GET /api/workflows/{name}/grid``). Each is a bounded LRU counted in steps, read once per
gateway; a live run is read afresh every time.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import TYPE_CHECKING, cast

import msgspec
from heddle.shared.broker.kv_reads import read_current, read_steps
from heddle.shared.wire import names
from heddle.shared.wire.contracts import TERMINAL_RUN, RunRecord, RunSummary, StepRecord, StepStatus

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket

MAX_STEPS = 1000  # a run with more steps gets no states on the grid
CACHED_CELLS = 200_000  # finished runs' states kept, in steps


class FinishedSteps:
    """The step records of the runs last paged through that have ended (they change no
    more), so that reading a finished 100,000-step run page by page costs one replay, not one
    per page. At most ``MAX_CACHED`` steps in all, the least recently read dropped first; a
    live run is read afresh for every page."""

    MAX_CACHED = 200_000

    def __init__(self) -> None:
        self._runs: OrderedDict[str, list[StepRecord]] = OrderedDict()
        self._held = 0

    async def read(self, runs_kv: Bucket, run: RunRecord) -> list[StepRecord]:
        kept = self._runs.get(run.run_id)
        if kept is not None:
            self._runs.move_to_end(run.run_id)
            return kept
        steps = await read_steps(runs_kv, run)
        # Complete only: a run read while retention deletes it is not kept short.
        if run.status in TERMINAL_RUN and len(steps) == run.step_count:
            self._runs[run.run_id] = steps
            self._held += len(steps)
            while self._held > self.MAX_CACHED and len(self._runs) > 1:
                self._held -= len(self._runs.popitem(last=False)[1])
        return steps


class _StepState(msgspec.Struct, rename="camel"):
    id: str
    index: int = 0
    status: str = "pending"


_decode_state = msgspec.json.Decoder(_StepState).decode
States = dict[str, StepStatus]


RunKey = tuple[str, str]  # (run id, createdAt): a run id used again later is another run


class FinishedStates:
    """Step states of finished runs, least recently used dropped first, at most
    ``CACHED_CELLS`` steps in all."""

    def __init__(self, cells: int = CACHED_CELLS) -> None:
        self.cells = cells
        self._held: OrderedDict[RunKey, States] = OrderedDict()
        self._count = 0

    def get(self, run: RunKey) -> States | None:
        states = self._held.get(run)
        if states is not None:
            self._held.move_to_end(run)
        return states

    def put(self, run: RunKey, states: States) -> None:
        if run in self._held or len(states) > self.cells:
            return
        self._held[run] = states
        self._count += len(states)
        while self._count > self.cells:
            _, dropped = self._held.popitem(last=False)
            self._count -= len(dropped)


async def step_states(
    runs_kv: Bucket, run: RunSummary, kept: FinishedStates, gate: asyncio.Semaphore
) -> States | None:
    """Each step's state in the run, by one filtered replay of its step records of which only
    the id, index and state are decoded (``gate`` bounds the replays at once); None for a run
    of more than ``MAX_STEPS`` steps."""
    if run.step_count > MAX_STEPS:
        return None
    key = (run.run_id, run.created_at)
    held = kept.get(key)
    if held is not None:
        return held
    async with gate:
        entries = await read_current(runs_kv, names.steps_of_run(run.run_id))
    steps = sorted((_decode_state(e.value) for e in entries), key=lambda s: s.index)
    # As the orchestrator stored them (StepRecord.status), read without checking.
    states = cast(States, {s.id: s.status for s in steps})
    if run.status in TERMINAL_RUN and len(states) == run.step_count:
        kept.put(key, states)
    return states
