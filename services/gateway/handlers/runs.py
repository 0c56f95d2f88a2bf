"""Runs over HTTP: submit one (``POST /api/runs``), and list the recent ones
(``GET /api/runs``).

The list is read from the gateway's index of run records (reads/run_index.py: kept by a
consumer of ``run.*``, caught up to each request), newest first by ``createdAt``, as
summaries, plus a get of the ``hist.<workflow>.<run>`` entry of each listed run of a named
workflow: the orchestrator keeps that run's step counts by state there (a run record has
only its step count). No step is read.
"""

from __future__ import annotations

import asyncio
from typing import get_args

from aiohttp import web
from heddle.services.gateway.http import answers, inputs
from heddle.services.gateway.http.call_checks import call_problems
from heddle.services.gateway.http.keys import RESOURCES, RUN_INDEX, SETTINGS
from heddle.services.gateway.http.params import whole_number
from heddle.services.gateway.http.scope import listed_namespaces, namespace_scope
from heddle.services.gateway.http.submit import concurrency_fields, new_run_id, submit
from heddle.services.gateway.openapi.route import (
    LIMIT,
    NAMESPACE,
    RUN_STATUS,
    UNKNOWN_NAMESPACE,
    Answer,
    Route,
    links,
)
from heddle.services.gateway.reads.runs import run_facts
from heddle.shared.api.answers import RunList, RunListEntry, Submitted
from heddle.shared.broker.kv_reads import value_of
from heddle.shared.broker.nats_types import KeyValue
from heddle.shared.core.expressions import ExpressionError
from heddle.shared.core.step_env import inline_values
from heddle.shared.core.validation import parse_run_request
from heddle.shared.runtime.gc_pause import gc_paused
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    RunRecord,
    RunRequest,
    RunStatus,
    RunSummary,
    SubmitRun,
    run_summary_decoder,
)
from heddle.shared.wire.errors import InvalidWorkflow, Problem
from heddle.shared.wire.timefmt import now_rfc3339

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)


async def create_run(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    doc = await inputs.read_json(request)
    scope = await namespace_scope(request, doc)
    try:
        with gc_paused():
            req = parse_run_request(doc, inputs.limits(settings))
    except InvalidWorkflow as exc:
        return answers.error(400, "invalid workflow", exc.problems)
    kv = request.app[RESOURCES].workflows
    calls = await call_problems(kv, scope.namespace, req.steps, req.on_exit)
    if calls:
        return answers.error(400, "invalid workflow", calls)
    chosen = req.run_id or req.workflow_id
    run_id = scope.stored(chosen or new_run_id())
    values = inline_values(req.params)
    try:
        keyed = concurrency_fields(scope, req.concurrency, values, req.name)
    except ExpressionError as exc:
        return answers.error(400, "invalid workflow", [Problem("concurrency.key", exc.problem)])
    cmd = SubmitRun(
        run_id=run_id,
        steps=req.steps,
        submitted_at=now_rfc3339(),
        workflow_name=None if req.name is None else scope.stored(req.name),
        params=values,
        env=req.env,
        on_exit=req.on_exit,
        timeout_seconds=req.timeout_seconds,
        priority=req.priority,
        notify=req.notify,
        **keyed,
    )
    return await submit(request, cmd, chosen_id=chosen is not None)


def list_params(request: web.Request) -> tuple[int, str | None]:
    """``limit`` and ``status`` from the query, or a 400 naming every problem."""
    problems: list[Problem] = []
    limit = whole_number("limit", request.query.get("limit"), 1, MAX_LIMIT, problems)
    status = run_status(request, problems)
    if problems:
        raise answers.bad_request(f"invalid {' and '.join(p.path for p in problems)}", problems)
    return limit or DEFAULT_LIMIT, status


def run_status(request: web.Request, problems: list[Problem]) -> str | None:
    """``?status=``: one run state, or None; a problem added if it is not one."""
    status = request.query.get("status")
    if status is not None and status not in RUN_STATUSES:
        message = f"status must be one of {', '.join(RUN_STATUSES)}, not {status!r}"
        problems.append(Problem("status", message))
    return status


def run_summary(run: RunRecord, counts: dict[str, int] | None) -> RunListEntry:
    return RunListEntry(**run_facts(run), step_count=run.step_count, counts=counts)


async def list_runs(request: web.Request) -> web.Response:
    limit, status = list_params(request)
    namespaces = await listed_namespaces(request)
    runs_kv = request.app[RESOURCES].runs
    runs = await request.app[RUN_INDEX].caught_up()
    shown = runs.newest(limit, status, namespaces)
    # Only runs of registered workflows have counts kept, in the history index: one get per
    # shown run (at most ``limit``), not a replay of every workflow's history.
    named = [(r, r.registered_workflow) for r in shown if r.registered_workflow is not None]
    found = await asyncio.gather(*(_history_entry(runs_kv, wf, r.run_id) for r, wf in named))
    counts = {
        r.run_id: summary.counts for (r, _), summary in zip(named, found, strict=True) if summary
    }
    return answers.json_response(
        RunList(
            runs=[run_summary(r, counts.get(r.run_id)) for r in shown],
            total=runs.count(None, namespaces),
            matching=runs.count(status, namespaces),
            limit=limit,
        )
    )


async def _history_entry(kv: KeyValue, workflow: str, run_id: str) -> RunSummary | None:
    # None if not written yet: the orchestrator writes it shortly after the run.
    value = await value_of(kv, names.hist_key(workflow, run_id))
    return run_summary_decoder.decode(value) if value else None


# ---- routes ------------------------------------------------------------------------------

RUN_ID = "$response.body#/runId"
RUN_LINKS = links(RUN_ID, {"getRun": "run", "cancelRun": "run", "retryRun": "run"})
SUBMIT_LINKS = {
    status: found
    | {
        "GetStep": {
            "operationId": "getStep",
            "parameters": {"run": RUN_ID, "step": "$request.body#/steps/0/id"},
        }
    }
    for status, found in RUN_LINKS.items()
}
# A run that refuses to wait at its concurrency key's limit (docs/pools.md).
REFUSED = "The workflow's concurrency key is at its limit and its onLimit is refuse (`heldBy`)"
SUBMITTED: dict[int, Answer] = {
    201: (Submitted, "Created and stored by the orchestrator"),
    200: (Submitted, "A run with this id exists already: nothing was created"),
    202: (
        Submitted,
        "Accepted; not confirmed within the wait, or carried beside its command (over 256 KiB)",
    ),
}
SUBMIT_NOTE = (
    "Every step's command is run as written, so submitting needs the admin role. A client "
    "may choose the run id (`runId`): submitting it again answers 200 with that run."
)

ROUTES = (
    Route(
        "POST",
        "/api/runs",
        create_run,
        operation_id="createRun",
        summary="Submit a workflow to run now",
        tag="runs",
        role="admin",  # any command, run as it is written
        params=(NAMESPACE,),
        answers=SUBMITTED,
        body=RunRequest,
        description=SUBMIT_NOTE,
        links=SUBMIT_LINKS,
        errors={**UNKNOWN_NAMESPACE, 409: REFUSED},
        example={"runId": "hello-1", "steps": [{"id": "hello", "command": "echo hello"}]},
    ),
    Route(
        "GET",
        "/api/runs",
        list_runs,
        operation_id="listRuns",
        summary="Runs, newest first",
        tag="runs",
        role="viewer",
        answers={200: (RunList, "The newest runs")},
        params=(NAMESPACE, LIMIT, RUN_STATUS),
        errors=UNKNOWN_NAMESPACE,
    ),
    Route(
        "POST",
        "/workflow",
        create_run,
        operation_id="createRunLegacy",
        summary="Submit a workflow (older name)",
        tag="legacy",
        role="admin",
        params=(NAMESPACE,),
        errors=UNKNOWN_NAMESPACE,
        answers=SUBMITTED,
        body=RunRequest,
        links=links(RUN_ID, {"getRunLegacy": "id"}),
        deprecated=True,
        description=SUBMIT_NOTE,
    ),
)
