"""Every operation of the HTTP API, as the OpenAPI document describes it (``document.py``).

One entry per method and route: its parameters, its body's type and its answers' types.
The error statuses every operation shares (auth, Host, bodies, NATS) are added by
``openapi.error_statuses``; an entry lists only the errors that are its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from services.gateway.handlers.history import CURSOR_PATTERN, GRID_LIMIT
from services.gateway.handlers.run_steps import (
    DEFAULT_PAGE,
    FULL_DOCUMENT_MAX,
    MAX_PAGE,
    STEP_STATUSES,
    STEPS_CHOICES,
)
from services.gateway.openapi.types import (
    ID_SCHEMA_PATTERN,
    LogDump,
    NewToken,
    PatchWorkflow,
    PausedWorkflow,
    Pool,
    Registered,
    RegisterRequest,
    RunDocument,
    RunList,
    StatusDoc,
    StepPage,
    StepWithLogs,
    Submitted,
    TokenDoc,
    TokenList,
    TokenRequest,
    Triggered,
    TriggerRequest,
    WorkflowDefinition,
    WorkflowGrid,
    WorkflowList,
    WorkflowRuns,
)
from services.gateway.reads.finished import MAX_STEPS as GRID_STEPS
from services.gateway.reads.log_reader import DEFAULT_TAIL, MAX_TAIL
from shared.contracts import RunRequest

# (a JSON type, a media type, or a tuple of them for an answer of several; its meaning)
Answer = tuple[type | str | tuple[type | str, ...] | None, str]


@dataclass(frozen=True)
class Param:
    name: str
    where: Literal["path", "query", "header"]
    schema: dict[str, Any]
    description: str


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str
    summary: str
    tag: str
    answers: dict[int, Answer]
    params: tuple[Param, ...] = ()
    body: type | None = None
    body_required: bool = True
    example: dict[str, Any] | None = None  # a valid body, for readers and the fuzzer's first run
    errors: dict[int, str] = field(default_factory=dict)  # this operation's own meanings
    links: dict[int, dict[str, Any]] = field(default_factory=dict)
    description: str = ""
    deprecated: bool = False
    offline: bool = False  # answers without NATS: never a 503


ID = {"type": "string", "pattern": ID_SCHEMA_PATTERN}
_ONE_STATUS = "|".join(STEP_STATUSES)
STATUS_LIST_PATTERN = f"^({_ONE_STATUS})(,({_ONE_STATUS}))*$"


def _id(name: str, what: str) -> Param:
    return Param(name, "path", ID, f"The {what}")


RUN = _id("run", "run's id")
STEP = _id("step", "step's id")
WORKFLOW = _id("name", "workflow's name")


RUN_STATUS = Param(
    "status",
    "query",
    {"enum": ["running", "succeeded", "failed", "cancelled"]},
    "Only runs in this state",
)


def steps_param(description: str) -> Param:
    return Param("steps", "query", {"enum": list(STEPS_CHOICES)}, description)


LIMIT = Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000}, "How many")
VERSION = Param(
    "version", "query", {"type": "integer", "minimum": 1, "maximum": 2**31}, "A version"
)
CURSOR = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
BEFORE = Param(
    "before",
    "query",
    {"type": "string", "pattern": CURSOR_PATTERN},
    "Only runs older than this cursor: the `next` of the page before",
)


def _links(source: str, targets: dict[str, str], **more: str) -> dict[int, dict[str, Any]]:
    """OpenAPI links from an operation's 2xx answers: ``targets`` maps an operationId to
    its path parameter, filled from ``source`` (a runtime expression); ``more`` adds
    parameters every target gets."""
    links = {
        op[0].upper() + op[1:]: {"operationId": op, "parameters": {param: source, **more}}
        for op, param in targets.items()
    }
    return {200: links, 201: links, 202: links}


RUN_ID = "$response.body#/runId"
RUN_LINKS = _links(RUN_ID, {"getRun": "run", "cancelRun": "run", "retryRun": "run"})
SUBMIT_LINKS = {
    status: links
    | {
        "GetStep": {
            "operationId": "getStep",
            "parameters": {"run": RUN_ID, "step": "$request.body#/steps/0/id"},
        }
    }
    for status, links in RUN_LINKS.items()
}
WORKFLOW_LINKS = _links(
    "$response.body#/name",
    {
        "getWorkflow": "name",
        "patchWorkflow": "name",
        "triggerRun": "name",
        "workflowRuns": "name",
        "workflowGrid": "name",
    },
)
SUBMITTED: dict[int, Answer] = {
    201: (Submitted, "Created and stored by the orchestrator"),
    200: (Submitted, "A run with this id exists already: nothing was created"),
    202: (
        Submitted,
        "Accepted; not confirmed within the wait, or carried beside its command (over 256 KiB)",
    ),
}
EVENTS_NOTE = (
    "Server-sent events: the current state first, then `step` (StepChange) and `run` "
    "(RunChange) events as they are stored, and a last `end` (RunEnd) when the run is over"
)
SUBMIT_NOTE = (
    "Every step's command is run as written, so submitting needs the admin role. A client "
    "may choose the run id (`runId`): submitting it again answers 200 with that run."
)

OPERATIONS: tuple[Operation, ...] = (
    # ---- runs
    Operation(
        "POST",
        "/api/runs",
        "createRun",
        "Submit a workflow to run now",
        "runs",
        SUBMITTED,
        body=RunRequest,
        description=SUBMIT_NOTE,
        links=SUBMIT_LINKS,
        example={"runId": "hello-1", "steps": [{"id": "hello", "command": "echo hello"}]},
    ),
    Operation(
        "GET",
        "/api/runs",
        "listRuns",
        "Runs, newest first",
        "runs",
        {200: (RunList, "The newest runs")},
        params=(LIMIT, RUN_STATUS),
    ),
    Operation(
        "GET",
        "/api/runs/{run}",
        "getRun",
        "A run with every step, or its summary",
        "runs",
        {200: (RunDocument, "The run document; its summary if `stepsIncluded` is false")},
        params=(
            RUN,
            steps_param(
                f"all: every step and edge (a 400 past {FULL_DOCUMENT_MAX} steps); none: the "
                f"summary. By default all up to {FULL_DOCUMENT_MAX} steps, none above"
            ),
        ),
        links=_links("$request.path.run", {"getSteps": "run"}),
    ),
    Operation(
        "GET",
        "/api/runs/{run}/steps",
        "getSteps",
        "A run's steps in pages, in the workflow's order",
        "runs",
        {200: (StepPage, "The steps matching the filter, from the offset")},
        params=(
            RUN,
            Param(
                "offset",
                "query",
                {"type": "integer", "minimum": 0},
                "Matching steps to pass over (default 0)",
            ),
            Param(
                "limit",
                "query",
                {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
                f"How many (default {DEFAULT_PAGE})",
            ),
            Param(
                "status",
                "query",
                {"type": "string", "pattern": STATUS_LIST_PATTERN},
                "Only steps in these states, comma-separated",
            ),
        ),
    ),
    Operation(
        "GET",
        "/api/runs/{run}/events",
        "runEvents",
        "A run's state changes, as they happen",
        "runs",
        {200: ("text/event-stream", EVENTS_NOTE)},
        params=(
            RUN,
            steps_param(
                "all (the default): the steps' states and changes too; none: only the run's "
                "and the end, for a client that waits for the run to end"
            ),
        ),
    ),
    Operation(
        "POST",
        "/api/runs/{run}/cancel",
        "cancelRun",
        "Cancel a run",
        "runs",
        {
            200: (Submitted, "It was cancelled already"),
            202: (Submitted, "Cancelling: running steps are stopped, the rest skipped"),
        },
        params=(RUN,),
        errors={409: "The run finished already (`status` says how)"},
    ),
    Operation(
        "POST",
        "/api/runs/{run}/retry",
        "retryRun",
        "Run a failed or cancelled run again from its failure",
        "runs",
        {
            201: (Submitted, "The retry, created: succeeded steps carried over, the rest run"),
            200: (Submitted, "The run was retried already: its retry"),
            202: (Submitted, "Accepted; the orchestrator had not confirmed it within the wait"),
        },
        params=(RUN,),
        errors={409: "The run is still running or succeeded (`status` says which)"},
    ),
    Operation(
        "GET",
        "/api/runs/{run}/steps/{step}",
        "getStep",
        "A step with its logs by attempt",
        "runs",
        {200: (StepWithLogs, "The step, and the last lines of each attempt")},
        params=(
            RUN,
            STEP,
            Param(
                "tail",
                "query",
                {"type": "integer", "minimum": 0, "maximum": MAX_TAIL},
                f"Lines per attempt (default {DEFAULT_TAIL})",
            ),
        ),
    ),
    Operation(
        "GET",
        "/api/runs/{run}/steps/{step}/logs",
        "getStepLogs",
        "A step's log lines",
        "runs",
        {
            200: (
                (LogDump, "text/event-stream"),
                "Every line after the cursor (JSON); with follow, server-sent events: a line "
                "per event (its cursor as the id), `status` events and a last `end`",
            )
        },
        params=(
            RUN,
            STEP,
            Param("after", "query", CURSOR, "Lines after this cursor only"),
            Param(
                "follow",
                "query",
                {"type": "boolean"},
                "Stream the lines as server-sent events until the step ends",
            ),
            Param(
                "Last-Event-ID",
                "header",
                {"type": "string", "pattern": "^[0-9]{0,19}$"},
                "With follow: resume after this cursor",
            ),
        ),
    ),
    Operation(
        "GET",
        "/api/runners",
        "listRunners",
        "The runner pool",
        "runners",
        {200: (Pool, "Every runner and what it holds")},
    ),
    # ---- registered workflows
    Operation(
        "POST",
        "/api/workflows",
        "registerWorkflow",
        "Register a workflow version",
        "workflows",
        {
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
    Operation(
        "GET",
        "/api/workflows",
        "listWorkflows",
        "Registered workflows",
        "workflows",
        {200: (WorkflowList, "Each workflow's latest version and last run")},
    ),
    Operation(
        "GET",
        "/api/workflows/{name}",
        "getWorkflow",
        "A workflow's definition",
        "workflows",
        {200: (WorkflowDefinition, "The latest version, or the one asked for")},
        params=(WORKFLOW, VERSION),
    ),
    Operation(
        "PATCH",
        "/api/workflows/{name}",
        "patchWorkflow",
        "Pause or resume its schedule",
        "workflows",
        {200: (PausedWorkflow, "The workflow as it is now")},
        params=(WORKFLOW,),
        body=PatchWorkflow,
        example={"paused": True},
    ),
    Operation(
        "POST",
        "/api/workflows/{name}/runs",
        "triggerRun",
        "Run a registered workflow now",
        "workflows",
        {
            201: (Triggered, "Created"),
            200: (Triggered, "A run with this idempotency key exists already"),
            202: (Triggered, "Accepted; not confirmed within the wait"),
        },
        params=(
            WORKFLOW,
            VERSION,
            Param(
                "Idempotency-Key",
                "header",
                {"type": "string", "minLength": 1, "maxLength": 256},
                "Triggers with the same key make one run",
            ),
        ),
        body=TriggerRequest,
        body_required=False,
        links=RUN_LINKS,
        example={"idempotencyKey": "2026-12-01"},
    ),
    Operation(
        "GET",
        "/api/workflows/{name}/runs",
        "workflowRuns",
        "A workflow's run history",
        "workflows",
        {200: (WorkflowRuns, "Newest first; `next` pages back")},
        params=(WORKFLOW, LIMIT, BEFORE, RUN_STATUS),
        description="Every run kept is reachable: pass an answer's `next` as `before` for the "
        "older runs, until `next` is null; `status` keeps the runs in that state alone, on "
        "every page.",
    ),
    Operation(
        "GET",
        "/api/workflows/{name}/grid",
        "workflowGrid",
        "A workflow's run history with each step's state",
        "workflows",
        {200: (WorkflowGrid, "Runs newest first, each with its steps' states")},
        params=(
            WORKFLOW,
            Param(
                "limit",
                "query",
                {"type": "integer", "minimum": 1, "maximum": GRID_LIMIT},
                "How many runs (default 20)",
            ),
            BEFORE,
        ),
        description="The history's page, as `GET /api/workflows/{name}/runs` pages it, with "
        "`states` (step id to state) for each run; a run of more than "
        f"{GRID_STEPS} steps has `states: null`. Finished runs' states are read once per "
        "gateway and kept.",
    ),
    # ---- API tokens
    Operation(
        "POST",
        "/api/tokens",
        "createToken",
        "Make an API token",
        "tokens",
        {201: (NewToken, "The token: shown once, never again")},
        body=TokenRequest,
        links=_links("$response.body#/name", {"revokeToken": "name"}),
        errors={409: "A token of that name exists already"},
        example={"name": "ci", "role": "operator"},
    ),
    Operation(
        "GET",
        "/api/tokens",
        "listTokens",
        "API tokens (never their secrets)",
        "tokens",
        {200: (TokenList, "Every token")},
        offline=True,
    ),
    Operation(
        "POST",
        "/api/tokens/{name}/revoke",
        "revokeToken",
        "Revoke an API token",
        "tokens",
        {200: (TokenDoc, "Revoked (or it was already)")},
        params=(_id("name", "token's name"),),
    ),
    # ---- operations and the page
    Operation(
        "GET",
        "/healthz",
        "health",
        "Is the process alive",
        "operations",
        {200: (StatusDoc, "Alive")},
        offline=True,
    ),
    Operation(
        "GET",
        "/readyz",
        "ready",
        "Can it serve: is NATS answering",
        "operations",
        {200: (StatusDoc, "Ready")},
    ),
    Operation(
        "GET",
        "/metrics",
        "metrics",
        "Prometheus metrics",
        "operations",
        {200: ("text/plain", "The text exposition format")},
        offline=True,
    ),
    Operation(
        "GET",
        "/openapi.json",
        "openapi",
        "This document",
        "operations",
        {200: ("application/json", "OpenAPI 3.1")},
        offline=True,
    ),
    Operation(
        "GET",
        "/docs",
        "apiDocs",
        "This document as a page",
        "operations",
        {200: ("text/html", "The operations, their parameters and answers")},
        offline=True,
    ),
    Operation(
        "GET",
        "/",
        "page",
        "The web page",
        "page",
        {200: ("text/html", "The page")},
        offline=True,
    ),
    Operation(
        "GET",
        "/static/{name}",
        "asset",
        "The page's scripts and styles",
        "page",
        {200: ("application/octet-stream", "The file")},
        params=(Param("name", "path", {"type": "string"}, "The file's name"),),
        errors={404: "No such file"},
        offline=True,
    ),
    # ---- the routes older scripts use
    Operation(
        "POST",
        "/workflow",
        "createRunLegacy",
        "Submit a workflow (older name)",
        "legacy",
        SUBMITTED,
        body=RunRequest,
        links=_links(RUN_ID, {"getRunLegacy": "id"}),
        deprecated=True,
        description=SUBMIT_NOTE,
    ),
    Operation(
        "GET",
        "/workflow/{id}",
        "getRunLegacy",
        "A run (older name)",
        "legacy",
        {200: (RunDocument, "The run document")},
        params=(_id("id", "run's id"),),
        deprecated=True,
    ),
    Operation(
        "GET",
        "/pods",
        "listPods",
        "The runner pool (older name)",
        "legacy",
        {200: (Pool, "Every runner and what it holds")},
        deprecated=True,
    ),
)
