"""A run's document and its steps in pages: ``GET /api/runs/{run}`` (``?steps=all|none``)
and ``GET /api/runs/{run}/steps?offset=&limit=&status=``.

A run of up to ``FULL_DOCUMENT_MAX`` steps is shown whole by default, as it always was. A
bigger one (a 100,000-step document is tens of MB of JSON) is shown as its summary (the run,
its counts, ``stepsIncluded: false``), and its steps are read in pages, in the workflow's
order, filtered by state if asked. ``?steps=all`` on such a run is a 400 naming the pages.
"""

from __future__ import annotations

from typing import get_args

from aiohttp import web
from heddle.services.gateway.http import answers, params
from heddle.services.gateway.http.keys import FINISHED_STEPS, RESOURCES, RUN_INDEX, SETTINGS
from heddle.services.gateway.http.scope import scoped_run
from heddle.services.gateway.openapi.route import NAMESPACE, RUN, Param, Route, id_param, links
from heddle.services.gateway.reads.runs import run_document, step_documents
from heddle.services.gateway.reads.wait_facts import WaitSources
from heddle.shared.api.answers import RunDocument, StepPage
from heddle.shared.core.namespaces import namespace_of
from heddle.shared.wire.contracts import StepStatus
from heddle.shared.wire.errors import Problem

FULL_DOCUMENT_MAX = 10_000  # steps a run document holds whole
DEFAULT_PAGE = 100
MAX_PAGE = 1000
STEP_STATUSES: tuple[str, ...] = get_args(StepStatus)
STEPS_CHOICES = ("all", "none")


def steps_choice(request: web.Request) -> str | None:
    """``?steps=``: all, none, or None when absent (the run's size decides)."""
    raw = request.query.get("steps")
    if raw is not None and raw not in STEPS_CHOICES:
        shown = raw[: params.SHOWN]
        problem = Problem("steps", f"steps must be all or none, not {shown!r}")
        raise answers.bad_request("invalid steps", [problem])
    return raw


async def get_run(request: web.Request, key: str = "run") -> web.Response:
    choice = steps_choice(request)
    run_id, run = await scoped_run(request, key)
    res = request.app[RESOURCES]
    if run is None:
        return answers.error(404, f"run {run_id!r} not found")
    big = run.step_count > FULL_DOCUMENT_MAX
    if choice == "all" and big:
        message = (
            f"run {run_id!r} has {run.step_count} steps, more than a document holds "
            f"({FULL_DOCUMENT_MAX}): read them in pages, GET /api/runs/{run_id}/steps"
        )
        return answers.error(400, message, [Problem("steps", "too many steps for one document")])
    with_steps = choice == "all" or (choice is None and not big)
    sources = WaitSources(res.runners, res.js, request.app[RUN_INDEX].runs, res.concurrency)
    document = await run_document(
        res.runs,
        res.heartbeats,
        run,
        with_steps=with_steps,
        sources=sources,
        notifications=res.notifications,
    )
    return answers.json_response(document)


async def get_run_legacy(request: web.Request) -> web.Response:
    return await get_run(request, "id")


def page_params(request: web.Request, max_steps: int) -> tuple[int, int, frozenset[str]]:
    """``offset``, ``limit`` and ``status`` (comma-separated states), or a 400 naming every
    problem."""
    problems: list[Problem] = []
    query = request.query
    offset = params.whole_number("offset", query.get("offset"), 0, max_steps, problems)
    limit = params.whole_number("limit", query.get("limit"), 1, MAX_PAGE, problems)
    wanted: frozenset[str] = frozenset()
    raw = query.get("status")
    if raw is not None:
        wanted = frozenset(raw.split(","))
        unknown = sorted(wanted.difference(STEP_STATUSES))
        if unknown or not raw:
            shown = ", ".join(repr(u[: params.SHOWN]) for u in unknown) or "''"
            message = f"status must be one or more of {', '.join(STEP_STATUSES)}, not {shown}"
            problems.append(Problem("status", message))
    if problems:
        raise answers.bad_request(f"invalid {' and '.join(p.path for p in problems)}", problems)
    return offset or 0, limit or DEFAULT_PAGE, wanted


async def get_steps(request: web.Request) -> web.Response:
    offset, limit, wanted = page_params(request, max(request.app[SETTINGS].max_steps, 1))
    run_id, run = await scoped_run(request)
    res = request.app[RESOURCES]
    if run is None:
        return answers.error(404, f"run {run_id!r} not found")
    steps = await request.app[FINISHED_STEPS].read(res.runs, run)
    if wanted:
        steps = [s for s in steps if s.status in wanted]
    page = steps[offset : offset + limit]
    after = offset + len(page)
    return answers.json_response(
        StepPage(
            run_id=run_id,
            namespace=namespace_of(run.run_id),
            step_count=run.step_count,
            matching=len(steps),
            offset=offset,
            limit=limit,
            next=after if after < len(steps) else None,
            steps=await step_documents(res.heartbeats, run.run_id, page),
        )
    )


# ---- routes ------------------------------------------------------------------------------

_ONE_STATUS = "|".join(STEP_STATUSES)
STATUS_LIST_PATTERN = f"^({_ONE_STATUS})(,({_ONE_STATUS}))*$"


def steps_param(description: str) -> Param:
    return Param("steps", "query", {"enum": list(STEPS_CHOICES)}, description)


ROUTES = (
    Route(
        "GET",
        "/api/runs/{run}",
        get_run,
        operation_id="getRun",
        summary="A run with every step, or its summary",
        tag="runs",
        role="viewer",
        answers={200: (RunDocument, "The run document; its summary if `stepsIncluded` is false")},
        params=(
            NAMESPACE,
            RUN,
            steps_param(
                f"all: every step and edge (a 400 past {FULL_DOCUMENT_MAX} steps); none: the "
                f"summary. By default all up to {FULL_DOCUMENT_MAX} steps, none above"
            ),
        ),
        links=links("$request.path.run", {"getSteps": "run"}),
    ),
    Route(
        "GET",
        "/api/runs/{run}/steps",
        get_steps,
        operation_id="getSteps",
        summary="A run's steps in pages, in the workflow's order",
        tag="runs",
        role="viewer",
        answers={200: (StepPage, "The steps matching the filter, from the offset")},
        params=(
            NAMESPACE,
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
    Route(
        "GET",
        "/workflow/{id}",
        get_run_legacy,
        operation_id="getRunLegacy",
        summary="A run (older name)",
        tag="legacy",
        role="viewer",
        answers={200: (RunDocument, "The run document")},
        params=(
            NAMESPACE,
            id_param("id", "run's id"),
        ),
        deprecated=True,
    ),
)
