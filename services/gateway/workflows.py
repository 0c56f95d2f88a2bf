"""HTTP handlers for registered workflows: the registry, triggers and run history.

Registration writes the heddle-workflows bucket itself, by compare-and-set (see
``shared/broker/registry.py``): the answer carries the version, and two gateways registering at
once still get distinct versions. Runs are only ever created by the orchestrator, from a
``SubmitRun`` command; history is read from the index the orchestrator keeps
(``hist.<workflow>.<run>`` in heddle-runs), one small entry per run, never the steps.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import msgspec
from aiohttp import web
from heddle.services.gateway import run_inputs, views
from heddle.services.gateway.api_types import (
    Edge,
    HistoryEntry,
    LastRun,
    PausedWorkflow,
    Registered,
    Submitted,
    Triggered,
    WorkflowDefinition,
    WorkflowList,
    WorkflowRuns,
    WorkflowSummary,
)
from heddle.services.gateway.keys import RESOURCES, RUN_INDEX, SETTINGS
from heddle.services.gateway.params import query_int
from heddle.services.gateway.web import run_status
from heddle.shared.broker import registry
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.core.cron import slots_between
from heddle.shared.core.cron_plan import keyed_run_id, scheduled_run_id
from heddle.shared.core.validation import parse_workflow
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    RunRecord,
    RunSummary,
    SubmitRun,
    WorkflowLatest,
    WorkflowVersion,
    run_summary_decoder,
)
from heddle.shared.wire.errors import DocumentTooLarge, InvalidWorkflow, Problem
from heddle.shared.wire.timefmt import epoch, now_rfc3339, rfc3339

DEFAULT_LIMIT = 20
MAX_LIMIT = 1000
MAX_VERSION = 2**31
RECENT = 10  # recent runs per workflow in the list
NEXT_FIRES = 3
HORIZON = timedelta(days=5 * 366)  # how far ahead next fire times are looked for
# A page cursor: the last shown run's createdAt and id (history is sorted on both).
CURSOR = re.compile(r"^([0-9][0-9T:.+Z-]{9,39})_([A-Za-z0-9_-]{1,64})\Z")
CURSOR_PATTERN = CURSOR.pattern.replace("\\Z", "$")


def _bad(message: str, problems: list[Problem]) -> web.Response:
    return views.error(400, message, problems)


def unknown(name: str, version: int | None = None) -> web.Response:
    if version is None:
        return views.error(404, f"workflow {name!r} not found")
    return views.error(404, f"workflow {name!r} has no version {version}")


def facts(w: WorkflowLatest) -> dict[str, Any]:
    """What a workflow's list entry and its pause answer share."""
    return {
        "name": w.name,
        "version": w.version,
        "registered_at": w.registered_at,
        "schedule": w.schedule,
        "timezone": w.timezone,
        "catchup": w.catchup,
        "paused": w.paused,
        "step_count": w.step_count,
        "description": w.description,
    }


def next_fires(w: WorkflowLatest, now: datetime) -> list[str]:
    """The schedule's next slots after ``now`` (none while paused), in UTC."""
    if not w.schedule or w.paused:
        return []
    try:
        slots = slots_between(w.schedule, w.timezone, now, now + HORIZON, NEXT_FIRES)
    except ValueError:  # croniter's errors are ValueErrors: it gives up on unreachable dates
        return []
    return [rfc3339(s) for s in slots]


def recent_runs(runs: list[RunRecord]) -> list[LastRun]:
    return [LastRun(run_id=r.run_id, status=r.status, created_at=r.created_at) for r in runs]


def summary_document(
    w: WorkflowLatest, last: RunSummary | None, recent: list[RunRecord], now: datetime
) -> WorkflowSummary:
    shown = None
    if last is not None:
        shown = LastRun(run_id=last.run_id, status=last.status, created_at=last.created_at)
    return WorkflowSummary(
        **facts(w),
        last_run=shown,
        recent=recent_runs(recent),
        next_fires=next_fires(w, now),
    )


def definition_document(
    w: WorkflowVersion, latest: WorkflowLatest, recent: list[RunRecord], now: datetime
) -> WorkflowDefinition:
    spec = w.spec
    return WorkflowDefinition(
        name=w.name,
        version=w.version,
        latest_version=latest.version,
        registered_at=w.registered_at,
        schedule=spec.schedule,
        timezone=spec.timezone,
        catchup=spec.catchup,
        paused=latest.paused,
        description=spec.description,
        step_count=len(spec.steps),
        params=spec.params,
        env=spec.env,
        steps=spec.steps,
        edges=[Edge(from_=p, to=s.id) for s in spec.steps for p in s.depends_on],
        recent=recent_runs(recent),
        next_fires=next_fires(latest, now),
    )


def history_entry(r: RunSummary) -> HistoryEntry:
    return HistoryEntry(
        run_id=r.run_id,
        status=r.status,
        version=r.version,
        trigger=r.trigger,
        scheduled_for=r.scheduled_for,
        created_at=r.created_at,
        finished_at=r.finished_at,
        counts=r.counts,
    )


# ---- handlers ---------------------------------------------------------------------------


async def register_workflow(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    doc = await views.read_json(request)
    try:
        spec = parse_workflow(doc, views.limits(settings), name_required=True)
    except InvalidWorkflow as exc:
        return _bad("invalid workflow", exc.problems)
    kv = request.app[RESOURCES].workflows
    try:
        done = await registry.register(kv, spec, epoch(), views.payload_limit(request))
    except DocumentTooLarge as exc:
        return views.too_large(exc)
    body = Registered(name=done.name, version=done.version, created=done.created)
    return views.json_response(body, 201 if done.created else 200)


async def list_workflows(request: web.Request) -> web.Response:
    res = request.app[RESOURCES]
    workflows = await registry.list_latest(res.workflows)
    last: dict[str, RunSummary] = {}
    for e in await read_current(res.runs, names.LAST_RUN_ALL):
        summary = run_summary_decoder.decode(e.value)
        last[summary.workflow_name] = summary
    # The recent runs come from the gateway's index of run records, in memory.
    runs = await request.app[RUN_INDEX].caught_up()
    now = datetime.now(UTC)
    return views.json_response(
        WorkflowList(
            workflows=[
                summary_document(w, last.get(w.name), runs.newest_of(w.name, RECENT), now)
                for w in workflows
            ]
        )
    )


async def get_workflow(request: web.Request) -> web.Response:
    name = views.path_id(request, "name", "workflow name")
    version = query_int(request, "version", 1, MAX_VERSION, None)
    kv = request.app[RESOURCES].workflows
    current = await registry.get_latest(kv, name)
    if current is None:
        return unknown(name)
    latest = current[0]
    stored = await registry.get_version(kv, name, version or latest.version)
    if stored is None:
        return unknown(name, version)
    # Its recent runs from the gateway's index of run records, in memory, as the list's.
    runs = await request.app[RUN_INDEX].caught_up()
    recent = runs.newest_of(name, RECENT)
    return views.json_response(definition_document(stored, latest, recent, datetime.now(UTC)))


async def patch_workflow(request: web.Request) -> web.Response:
    name = views.path_id(request, "name", "workflow name")
    doc = await views.read_json(request)
    problems: list[Problem] = []
    if not isinstance(doc, dict):
        problems.append(Problem("", "the body must be a JSON object"))
    else:
        for key in doc:
            if key != "paused":
                problems.append(Problem(key, f"unknown field {key!r} (only 'paused' can change)"))
        if not isinstance(doc.get("paused"), bool):
            problems.append(Problem("paused", "paused must be true or false"))
    if problems:
        return _bad("invalid change", problems)
    updated = await registry.set_paused(
        request.app[RESOURCES].workflows, name, doc["paused"], epoch()
    )
    if updated is None:
        return unknown(name)
    return views.json_response(PausedWorkflow(**facts(updated), paused_at=updated.paused_at))


async def trigger_run(request: web.Request) -> web.Response:
    name = views.path_id(request, "name", "workflow name")
    version = query_int(request, "version", 1, MAX_VERSION, None)
    body: Any = {}
    if request.can_read_body:
        body = await views.read_json(request)
    problems = run_inputs.body_problems(body)
    if problems:
        return _bad("invalid request", problems)
    kv = request.app[RESOURCES].workflows
    if version is None:
        current = await registry.get_latest(kv, name)
        if current is None:
            return unknown(name)
        version = current[0].version
    stored = await registry.get_version(kv, name, version)
    if stored is None:
        return unknown(name, version) if await registry.get_latest(kv, name) else unknown(name)
    spec = stored.spec
    given = run_inputs.trigger_inputs(body, request.headers.get("Idempotency-Key"), spec)
    if given.problems:
        return _bad("invalid request", given.problems)
    key = given.key
    if given.slot is not None:  # one run per slot, whoever starts it (cron or a person)
        run_id = scheduled_run_id(name, given.slot)
    else:
        run_id = keyed_run_id(name, key) if key is not None else views.new_run_id()
    cmd = SubmitRun(
        run_id=run_id,
        steps=spec.steps,
        submitted_at=now_rfc3339(),
        workflow_name=name,
        version=version,
        trigger="api",
        scheduled_for=given.scheduled_for,
        scheduled_tz=(spec.timezone or "UTC") if given.slot is not None else None,
        params=given.params,
        env=spec.env,
    )
    response = await views.submit(request, cmd, chosen_id=key is not None or given.slot is not None)
    if response.status >= 300:
        return response
    answer = msgspec.json.decode(cast(bytes, response.body), type=Submitted)  # json_response's
    body = Triggered(**msgspec.structs.asdict(answer), workflow=name, version=version)
    return views.json_response(body, response.status)


def before_param(request: web.Request) -> tuple[str, str] | None:
    """``?before=CURSOR``: the (createdAt, run id) a page starts after, or a 400."""
    raw = request.query.get("before")
    if raw is None:
        return None
    m = CURSOR.match(raw)
    if m is None:
        shown = raw if len(raw) <= 80 else f"{raw[:80]}..."
        message = f"before must be a cursor from an answer's next, not {shown!r}"
        raise views.bad_request("invalid before", [Problem("before", message)])
    return m.group(1), m.group(2)


async def history_page(
    request: web.Request, name: str, limit: int
) -> tuple[list[RunSummary], str | None] | None:
    """A page of the workflow's history, newest first, after ``?before=``, and the cursor of
    the next page; None for an unknown workflow. One filtered replay of its summaries."""
    before = before_param(request)
    problems: list[Problem] = []
    status = run_status(request, problems)
    if problems:
        raise views.bad_request("invalid status", problems)
    res = request.app[RESOURCES]
    if await registry.get_latest(res.workflows, name) is None:
        return None
    runs = [
        run_summary_decoder.decode(e.value)
        for e in await read_current(res.runs, names.hist_of_workflow(name))
    ]
    if before is not None:
        runs = [r for r in runs if (r.created_at, r.run_id) < before]
    if status is not None:
        runs = [r for r in runs if r.status == status]
    runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
    page = runs[:limit]
    more = len(runs) > limit
    return page, (f"{page[-1].created_at}_{page[-1].run_id}" if more else None)


async def workflow_runs(request: web.Request) -> web.Response:
    name = views.path_id(request, "name", "workflow name")
    limit = query_int(request, "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)
    found = await history_page(request, name, limit)
    if found is None:
        return unknown(name)
    runs, after = found
    return views.json_response(
        WorkflowRuns(workflow=name, runs=[history_entry(r) for r in runs], next=after)
    )


def setup_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/api/workflows", register_workflow)
    r.add_get("/api/workflows", list_workflows)
    r.add_get("/api/workflows/{name}", get_workflow)
    r.add_patch("/api/workflows/{name}", patch_workflow)
    r.add_post("/api/workflows/{name}/runs", trigger_run)
    r.add_get("/api/workflows/{name}/runs", workflow_runs)
