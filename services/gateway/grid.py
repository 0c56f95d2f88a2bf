"""``GET /api/workflows/{name}/grid``: a workflow's history as runs by steps, each step's
state per run, for the web page's grid.

What it costs: the history page (one filtered replay of the workflow's summaries, as
``GET .../runs``), then for each run on the page (at most ``MAX_LIMIT``) one filtered replay of
its step records, of which only the id, index and state are decoded. The summaries stay small
(counts, not states) because every history read replays all of them. A finished run's states
never change, so they are kept in memory (a bounded LRU, counted in cells) and read once per
gateway: paging through old history reads each run once, and a page polled while runs go on
reads only the live ones again. A run of more than ``MAX_STEPS`` steps gets ``states: null``
(its counts are in the entry), so one page reads at most ``MAX_LIMIT * MAX_STEPS`` records.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import cast

import msgspec
from aiohttp import web
from heddle.services.gateway import views, workflows
from heddle.services.gateway.api_types import GridRun, WorkflowGrid
from heddle.services.gateway.keys import RESOURCES
from heddle.services.gateway.params import query_int
from heddle.shared.broker import registry
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.wire import names
from heddle.shared.wire.contracts import TERMINAL_RUN, RunSummary, StepStatus

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_STEPS = 1000  # a run with more steps gets no states on the grid
CACHED_CELLS = 200_000  # finished runs' states kept, in steps
READS_AT_ONCE = 8


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


FINISHED = web.AppKey("grid_finished_states", FinishedStates)


async def _states(request: web.Request, run: RunSummary, gate: asyncio.Semaphore) -> States | None:
    if run.step_count > MAX_STEPS:
        return None
    cache = request.app[FINISHED]
    key = (run.run_id, run.created_at)
    held = cache.get(key)
    if held is not None:
        return held
    async with gate:
        entries = await read_current(request.app[RESOURCES].runs, names.steps_of_run(run.run_id))
    steps = sorted((_decode_state(e.value) for e in entries), key=lambda s: s.index)
    # As the orchestrator stored them (StepRecord.status), read without checking.
    states = cast(States, {s.id: s.status for s in steps})
    if run.status in TERMINAL_RUN and len(states) == run.step_count:
        cache.put(key, states)
    return states


async def workflow_grid(request: web.Request) -> web.Response:
    name = views.path_id(request, "name", "workflow name")
    limit = query_int(request, "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)
    found = await workflows.history_page(request, name, limit)
    if found is None:
        return workflows.unknown(name)
    runs, after = found
    gate = asyncio.Semaphore(READS_AT_ONCE)
    states = await asyncio.gather(*(_states(request, r, gate) for r in runs))
    # Rows: the latest version's steps in its order, then any other step the page's runs had.
    rows: dict[str, None] = {}
    current = await registry.get_latest(request.app[RESOURCES].workflows, name)
    if current is not None:
        latest = await registry.get_version(
            request.app[RESOURCES].workflows, name, current[0].version
        )
        if latest is not None:
            rows.update((s.id, None) for s in latest.spec.steps)
    for st in states:
        rows.update((sid, None) for sid in st or ())
    columns = [
        GridRun(**msgspec.structs.asdict(workflows.history_entry(r)), states=st)
        for r, st in zip(runs, states, strict=True)
    ]
    return views.json_response(
        WorkflowGrid(workflow=name, steps=list(rows), runs=columns, next=after)
    )


def setup_routes(app: web.Application) -> None:
    app[FINISHED] = FinishedStates()
    app.router.add_get("/api/workflows/{name}/grid", workflow_grid)
