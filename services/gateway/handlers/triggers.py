"""``POST /api/workflows/{name}/runs``: a registered workflow run now, its latest version or
the one asked for, with the inputs of the trigger (run_inputs.py).

Runs are only ever created by the orchestrator, from a ``SubmitRun`` command, sent by the one
submit path (http/submit.py). A trigger with an idempotency key, or for a schedule's slot,
names its run, so that triggering it again makes no second run.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec
from aiohttp import web
from heddle.services.gateway.handlers import run_inputs
from heddle.services.gateway.handlers.runs import REFUSED, RUN_LINKS
from heddle.services.gateway.handlers.workflows import (
    MAX_VERSION,
    latest_of,
    scoped_workflow,
    unknown,
)
from heddle.services.gateway.http import answers, inputs
from heddle.services.gateway.http.keys import RESOURCES
from heddle.services.gateway.http.params import query_int
from heddle.services.gateway.http.scope import Scope
from heddle.services.gateway.http.submit import concurrency_fields, new_run_id, submit
from heddle.services.gateway.openapi.route import NAMESPACE, VERSION, WORKFLOW, Param, Route
from heddle.shared.api.answers import Submitted, Triggered
from heddle.shared.api.registry_answers import TriggerRequest
from heddle.shared.broker import registry
from heddle.shared.core.cron_plan import keyed_run_id, scheduled_run_id
from heddle.shared.core.expressions import ExpressionError
from heddle.shared.core.namespaces import namespace_of, qualified
from heddle.shared.wire.contracts import SubmitRun, WorkflowVersion
from heddle.shared.wire.errors import Problem
from heddle.shared.wire.timefmt import now_rfc3339


async def trigger_run(request: web.Request) -> web.Response:
    version = query_int(request, "version", 1, MAX_VERSION, None)
    name, stored_name = scoped_workflow(request)
    body: Any = {}
    if request.can_read_body:
        body = await inputs.read_json(request)
    problems = run_inputs.body_problems(body)
    if problems:
        return answers.error(400, "invalid request", problems)
    kv = request.app[RESOURCES].workflows
    latest = await latest_of(request, stored_name)
    if latest is None:
        return unknown(name)
    version = version or latest.version
    stored = await registry.get_version(kv, latest.name, version)
    if stored is None:
        return unknown(name, version)
    spec = stored.spec
    given = run_inputs.trigger_inputs(body, request.headers.get("Idempotency-Key"), spec)
    if given.problems:
        return answers.error(400, "invalid request", given.problems)
    key = given.key
    workflow = latest.name  # stored: its runs' ids are in its namespace
    if given.slot is not None:  # one run per slot, whoever starts it (cron or a person)
        run_id = scheduled_run_id(workflow, given.slot)
    elif key is not None:
        run_id = keyed_run_id(workflow, key)
    else:
        run_id = qualified(namespace_of(workflow), new_run_id())
    chosen = key is not None or given.slot is not None
    return await start_run(request, name, stored, given, run_id, "api", chosen_id=chosen)


async def start_run(
    request: web.Request,
    name: str,
    stored: WorkflowVersion,
    given: run_inputs.TriggerInputs,
    run_id: str,
    trigger: str,
    *,
    chosen_id: bool,
) -> web.Response:
    """Start a run of a registered version (``name`` as its caller named it) with the
    trigger's inputs, through the one submit path, and answer as the trigger route does:
    a trigger's, a webhook delivery's (handlers/hook_deliveries.py)."""
    spec = stored.spec
    workflow = stored.name  # stored: its runs' ids are in its namespace
    try:
        limited = concurrency_fields(
            Scope(namespace_of(workflow)), spec.concurrency, given.params, name
        )
    except ExpressionError as exc:
        return answers.error(400, "invalid request", [Problem("concurrency.key", exc.problem)])
    cmd = SubmitRun(
        run_id=run_id,
        steps=spec.steps,
        submitted_at=now_rfc3339(),
        workflow_name=workflow,
        version=stored.version,
        trigger=trigger,
        scheduled_for=given.scheduled_for,
        scheduled_tz=(spec.timezone or "UTC") if given.slot is not None else None,
        params=given.params,
        env=spec.env,
        on_exit=spec.on_exit,
        timeout_seconds=spec.timeout_seconds,
        priority=spec.priority if given.priority is None else given.priority,
        notify=spec.notify,
        **limited,
    )
    response = await submit(request, cmd, chosen_id=chosen_id)
    if response.status >= 300:
        return response
    answer = msgspec.json.decode(cast(bytes, response.body), type=Submitted)  # json_response's
    body = Triggered(**msgspec.structs.asdict(answer), workflow=name, version=stored.version)
    return answers.json_response(body, response.status)


ROUTES = (
    Route(
        "POST",
        "/api/workflows/{name}/runs",
        trigger_run,
        operation_id="triggerRun",
        summary="Run a registered workflow now",
        tag="workflows",
        role="operator",
        answers={
            201: (Triggered, "Created"),
            200: (Triggered, "A run with this idempotency key exists already"),
            202: (Triggered, "Accepted; not confirmed within the wait"),
        },
        params=(
            NAMESPACE,
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
        errors={409: REFUSED},
        links=RUN_LINKS,
        example={"idempotencyKey": "2026-12-01"},
    ),
)
