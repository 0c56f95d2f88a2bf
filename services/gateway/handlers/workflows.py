"""The registry of workflows over HTTP: register a version, list them, read one, pause or
resume its schedule.

Registration writes the heddle-workflows bucket itself, by compare-and-set (see
``shared/broker/registry.py``): the answer carries the version, and two gateways registering at
once still get distinct versions. A registered workflow's runs are started in triggers.py
and read in history.py.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from aiohttp import web
from heddle.services.gateway.http import answers, inputs
from heddle.services.gateway.http.call_checks import call_problems
from heddle.services.gateway.http.keys import RESOURCES, RUN_INDEX, SETTINGS
from heddle.services.gateway.http.params import query_int
from heddle.services.gateway.http.scope import listed_namespaces, namespace_scope, object_scope
from heddle.services.gateway.http.store_check import store_refused
from heddle.services.gateway.openapi.route import (
    NAMESPACE,
    UNKNOWN_NAMESPACE,
    VERSION,
    WORKFLOW,
    Route,
    links,
)
from heddle.services.gateway.reads.workflows import definition_document, facts, summary_document
from heddle.shared.api.registry_answers import (
    PatchWorkflow,
    PausedWorkflow,
    Registered,
    RegisterRequest,
    WorkflowDefinition,
    WorkflowList,
)
from heddle.shared.broker import registry
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.core.namespaces import in_namespaces, own_name
from heddle.shared.core.validation import parse_workflow
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunSummary, WorkflowLatest, run_summary_decoder
from heddle.shared.wire.errors import DocumentTooLarge, InvalidWorkflow, Problem
from heddle.shared.wire.timefmt import epoch

MAX_VERSION = 2**31
RECENT = 10  # recent runs per workflow in the list


def unknown(name: str, version: int | None = None) -> web.Response:
    if version is None:
        return answers.error(404, f"workflow {name!r} not found")
    return answers.error(404, f"workflow {name!r} has no version {version}")


async def register_workflow(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    doc = await inputs.read_json(request)
    scope = await namespace_scope(request, doc)
    try:
        parsed = parse_workflow(doc, inputs.limits(settings), name_required=True)
    except InvalidWorkflow as exc:
        return answers.error(400, "invalid workflow", exc.problems)
    # Stored under its qualified name; the namespace is in that name, not in the document.
    spec = msgspec.structs.replace(parsed, name=scope.stored(parsed.name or ""), namespace=None)
    kv = request.app[RESOURCES].workflows
    own = parsed.name or ""
    calls = await call_problems(kv, scope.namespace, spec.steps, spec.on_exit, registering=own)
    if calls:
        return answers.error(400, "invalid workflow", calls)
    if refused := await store_refused(request):
        return refused
    try:
        done = await registry.register(kv, spec, epoch(), inputs.payload_limit(request))
    except DocumentTooLarge as exc:
        return answers.too_large(exc)
    body = Registered(
        name=own_name(done.name),
        namespace=scope.namespace,
        version=done.version,
        created=done.created,
    )
    return answers.json_response(body, 201 if done.created else 200)


async def list_workflows(request: web.Request) -> web.Response:
    namespaces = await listed_namespaces(request)
    res = request.app[RESOURCES]
    workflows = [
        w for w in await registry.list_latest(res.workflows) if in_namespaces(w.name, namespaces)
    ]
    last: dict[str, RunSummary] = {}
    for e in await read_current(res.runs, names.LAST_RUN_ALL):
        summary = run_summary_decoder.decode(e.value)
        last[summary.workflow_name] = summary
    # The recent runs come from the gateway's index of run records, in memory.
    runs = await request.app[RUN_INDEX].caught_up()
    now = datetime.now(UTC)
    return answers.json_response(
        WorkflowList(
            workflows=[
                summary_document(w, last.get(w.name), runs.newest_of(w.name, RECENT), now)
                for w in workflows
            ]
        )
    )


def scoped_workflow(request: web.Request) -> tuple[str, str | None]:
    """The workflow a path names (``{name}``), as given, and its stored name: None in a
    namespace the caller may not see, where it answers as a workflow that does not exist."""
    name = inputs.path_id(request, "name", "workflow name")
    scope = object_scope(request)
    return name, scope.stored(name) if scope.seen else None


async def latest_of(request: web.Request, stored: str | None) -> WorkflowLatest | None:
    """A workflow's latest version's summary; None if unknown (or unseen: ``stored`` None)."""
    if stored is None:
        return None
    current = await registry.get_latest(request.app[RESOURCES].workflows, stored)
    return None if current is None else current[0]


async def get_workflow(request: web.Request) -> web.Response:
    version = query_int(request, "version", 1, MAX_VERSION, None)
    name, stored_name = scoped_workflow(request)
    kv = request.app[RESOURCES].workflows
    latest = await latest_of(request, stored_name)
    if latest is None:
        return unknown(name)
    stored = await registry.get_version(kv, latest.name, version or latest.version)
    if stored is None:
        return unknown(name, version)
    # Its recent runs from the gateway's index of run records, in memory, as the list's.
    runs = await request.app[RUN_INDEX].caught_up()
    recent = runs.newest_of(latest.name, RECENT)
    return answers.json_response(definition_document(stored, latest, recent, datetime.now(UTC)))


async def patch_workflow(request: web.Request) -> web.Response:
    name, stored = scoped_workflow(request)
    doc = await inputs.read_json(request)
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
        return answers.error(400, "invalid change", problems)
    updated = None
    if stored is not None:
        kv = request.app[RESOURCES].workflows
        updated = await registry.set_paused(kv, stored, doc["paused"], epoch())
    if updated is None:
        return unknown(name)
    return answers.json_response(PausedWorkflow(**facts(updated), paused_at=updated.paused_at))


# ---- routes ------------------------------------------------------------------------------

WORKFLOW_LINKS = links(
    "$response.body#/name",
    {
        "getWorkflow": "name",
        "patchWorkflow": "name",
        "triggerRun": "name",
        "workflowRuns": "name",
        "workflowGrid": "name",
    },
)
ROUTES = (
    Route(
        "POST",
        "/api/workflows",
        register_workflow,
        operation_id="registerWorkflow",
        summary="Register a workflow version",
        tag="workflows",
        role="admin",
        params=(NAMESPACE,),
        errors=UNKNOWN_NAMESPACE,
        answers={
            201: (Registered, "A new version"),
            200: (Registered, "The same document as the latest version: nothing changed"),
        },
        body=RegisterRequest,
        links=WORKFLOW_LINKS,
        example={
            "name": "nightly",
            "schedule": "0 6 * * *",
            "timezone": "Europe/Paris",
            "steps": [
                {"id": "extract", "command": "echo extract"},
                {"id": "load", "command": "echo load", "dependsOn": ["extract"], "retries": 2},
            ],
        },
    ),
    Route(
        "GET",
        "/api/workflows",
        list_workflows,
        operation_id="listWorkflows",
        summary="Registered workflows",
        tag="workflows",
        role="viewer",
        params=(NAMESPACE,),
        errors=UNKNOWN_NAMESPACE,
        answers={200: (WorkflowList, "Each workflow's latest version and last run")},
    ),
    Route(
        "GET",
        "/api/workflows/{name}",
        get_workflow,
        operation_id="getWorkflow",
        summary="A workflow's definition",
        tag="workflows",
        role="viewer",
        answers={200: (WorkflowDefinition, "The latest version, or the one asked for")},
        params=(NAMESPACE, WORKFLOW, VERSION),
    ),
    Route(
        "PATCH",
        "/api/workflows/{name}",
        patch_workflow,
        operation_id="patchWorkflow",
        summary="Pause or resume its schedule",
        tag="workflows",
        role="operator",
        answers={200: (PausedWorkflow, "The workflow as it is now")},
        params=(
            NAMESPACE,
            WORKFLOW,
        ),
        body=PatchWorkflow,
        example={"paused": True},
    ),
)
