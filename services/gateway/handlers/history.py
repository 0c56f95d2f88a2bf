"""A registered workflow's run history: ``GET /api/workflows/{name}/runs``, newest first in
pages, and ``GET /api/workflows/{name}/grid``, the same pages as runs by steps, each step's
state per run, for the web page's grid.

History is read from the index the orchestrator keeps (``hist.<workflow>.<run>`` in
heddle-runs), one small entry per run, never the steps: a page is one filtered replay of the
workflow's summaries. The grid then reads, for each run on the page (at most
``GRID_LIMIT``), one filtered replay of its step records, of which only the id, index and
state are decoded. The summaries stay small (counts, not states) because every history read
replays all of them. A finished run's states never change, so they are kept in memory
(reads/finished.py) and read once per gateway: paging through old history reads each run
once, and a page polled while runs go on reads only the live ones again. A run of more than
``MAX_STEPS`` steps gets ``states: null`` (its counts are in the entry), so one page reads at
most ``GRID_LIMIT * MAX_STEPS`` records.
"""

from __future__ import annotations

import asyncio
import re

import msgspec
from aiohttp import web
from heddle.services.gateway.handlers.runs import run_status
from heddle.services.gateway.handlers.workflows import scoped_workflow, unknown
from heddle.services.gateway.http import answers
from heddle.services.gateway.http.keys import FINISHED_STATES, RESOURCES
from heddle.services.gateway.http.params import query_int
from heddle.services.gateway.openapi.route import (
    LIMIT,
    NAMESPACE,
    RUN_STATUS,
    WORKFLOW,
    Param,
    Route,
)
from heddle.services.gateway.reads.finished import MAX_STEPS, step_states
from heddle.services.gateway.reads.workflows import history_entry
from heddle.shared.api.registry_answers import GridRun, WorkflowGrid, WorkflowRuns
from heddle.shared.broker import registry
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.core.namespaces import namespace_of, own_name
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunSummary, run_summary_decoder
from heddle.shared.wire.errors import Problem

DEFAULT_LIMIT = 20
MAX_LIMIT = 1000
GRID_LIMIT = 100
READS_AT_ONCE = 8  # the grid's replays of step records at once
# A page cursor: the last shown run's createdAt and id (history is sorted on both).
CURSOR = re.compile(r"^([0-9][0-9T:.+Z-]{9,39})_([A-Za-z0-9_-]{1,64})\Z")
CURSOR_PATTERN = CURSOR.pattern.replace("\\Z", "$")


def before_param(request: web.Request) -> tuple[str, str] | None:
    """``?before=CURSOR``: the (createdAt, run id) a page starts after, or a 400."""
    raw = request.query.get("before")
    if raw is None:
        return None
    m = CURSOR.match(raw)
    if m is None:
        shown = raw if len(raw) <= 80 else f"{raw[:80]}..."
        message = f"before must be a cursor from an answer's next, not {shown!r}"
        raise answers.bad_request("invalid before", [Problem("before", message)])
    return m.group(1), m.group(2)


async def history_page(
    request: web.Request, name: str | None, limit: int
) -> tuple[list[RunSummary], str | None] | None:
    """A page of the history of the workflow stored as ``name``, newest first, after
    ``?before=``, and the cursor of the next page; None for an unknown workflow (or an unseen
    one: ``name`` None). One filtered replay of its summaries."""
    before = before_param(request)
    problems: list[Problem] = []
    status = run_status(request, problems)
    if problems:
        raise answers.bad_request("invalid status", problems)
    res = request.app[RESOURCES]
    if name is None or await registry.get_latest(res.workflows, name) is None:
        return None
    runs = [
        run_summary_decoder.decode(e.value)
        for e in await read_current(res.runs, names.hist_of_workflow(name))
    ]
    if before is not None:
        runs = [r for r in runs if (r.created_at, own_name(r.run_id)) < before]
    if status is not None:
        runs = [r for r in runs if r.status == status]
    runs.sort(key=lambda r: (r.created_at, own_name(r.run_id)), reverse=True)
    page = runs[:limit]
    more = len(runs) > limit
    return page, (f"{page[-1].created_at}_{own_name(page[-1].run_id)}" if more else None)


async def workflow_runs(request: web.Request) -> web.Response:
    name, stored = scoped_workflow(request)
    limit = query_int(request, "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)
    found = await history_page(request, stored, limit)
    if found is None or stored is None:
        return unknown(name)
    runs, after = found
    entries = [history_entry(r) for r in runs]
    namespace = namespace_of(stored)
    return answers.json_response(
        WorkflowRuns(workflow=name, namespace=namespace, runs=entries, next=after)
    )


async def workflow_grid(request: web.Request) -> web.Response:
    name, stored = scoped_workflow(request)
    limit = query_int(request, "limit", 1, GRID_LIMIT, DEFAULT_LIMIT)
    found = await history_page(request, stored, limit)
    if found is None or stored is None:
        return unknown(name)
    runs, after = found
    gate = asyncio.Semaphore(READS_AT_ONCE)
    kept = request.app[FINISHED_STATES]
    runs_kv = request.app[RESOURCES].runs
    states = await asyncio.gather(*(step_states(runs_kv, r, kept, gate) for r in runs))
    # Rows: the latest version's steps in its order, then any other step the page's runs had.
    rows: dict[str, None] = {}
    current = await registry.get_latest(request.app[RESOURCES].workflows, stored)
    if current is not None:
        latest = await registry.get_version(
            request.app[RESOURCES].workflows, stored, current[0].version
        )
        if latest is not None:
            rows.update((s.id, None) for s in latest.spec.steps)
    for st in states:
        rows.update((sid, None) for sid in st or ())
    columns = [
        GridRun(**msgspec.structs.asdict(history_entry(r)), states=st)
        for r, st in zip(runs, states, strict=True)
    ]
    return answers.json_response(
        WorkflowGrid(
            workflow=name,
            namespace=namespace_of(stored),
            steps=list(rows),
            runs=columns,
            next=after,
        )
    )


# ---- routes ------------------------------------------------------------------------------

BEFORE = Param(
    "before",
    "query",
    {"type": "string", "pattern": CURSOR_PATTERN},
    "Only runs older than this cursor: the `next` of the page before",
)
ROUTES = (
    Route(
        "GET",
        "/api/workflows/{name}/runs",
        workflow_runs,
        operation_id="workflowRuns",
        summary="A workflow's run history",
        tag="workflows",
        role="viewer",
        answers={200: (WorkflowRuns, "Newest first; `next` pages back")},
        params=(NAMESPACE, WORKFLOW, LIMIT, BEFORE, RUN_STATUS),
        description="Every run kept is reachable: pass an answer's `next` as `before` for the "
        "older runs, until `next` is null; `status` keeps the runs in that state alone, on "
        "every page.",
    ),
    Route(
        "GET",
        "/api/workflows/{name}/grid",
        workflow_grid,
        operation_id="workflowGrid",
        summary="A workflow's run history with each step's state",
        tag="workflows",
        role="viewer",
        answers={200: (WorkflowGrid, "Runs newest first, each with its steps' states")},
        params=(
            NAMESPACE,
            WORKFLOW,
            Param(
                "limit",
                "query",
                {"type": "integer", "minimum": 1, "maximum": GRID_LIMIT},
                f"How many runs (default {DEFAULT_LIMIT})",
            ),
            BEFORE,
        ),
        description="The history's page, as `GET /api/workflows/{name}/runs` pages it, with "
        "`states` (step id to state) for each run; a run of more than "
        f"{MAX_STEPS} steps has `states: null`. Finished runs' states are read once per "
        "gateway and kept.",
    ),
)
