"""``POST /hooks/{workflow}/{hook}``: a webhook delivery, which starts a run of the
workflow's newest version with the parameters its hook's expressions take from the body
(docs/webhooks.md).

No token: the body's HMAC under the hook's secret (``X-Heddle-Signature-256``, or GitHub's
``X-Hub-Signature-256``) is the delivery's whole authentication, so the route is open and
the auth middleware skips its origin and form checks (``Route.signed``): a page elsewhere
cannot sign. A delivery id (``X-Heddle-Delivery``, ``X-GitHub-Delivery``) names the run,
so a repeated delivery, on any gateway, makes no second run (http/submit.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from aiohttp import web
from heddle.services.gateway.handlers import run_inputs
from heddle.services.gateway.handlers.runs import REFUSED
from heddle.services.gateway.handlers.triggers import start_run
from heddle.services.gateway.handlers.workflows import latest_of
from heddle.services.gateway.http import answers, slow_clients
from heddle.services.gateway.http.inputs import path_id
from heddle.services.gateway.http.keys import HOOK_RATE, RESOURCES, SETTINGS
from heddle.services.gateway.http.params import sent_as_utf8
from heddle.services.gateway.http.scope import asked_namespace
from heddle.services.gateway.http.submit import new_run_id
from heddle.services.gateway.openapi.route import NAMESPACE, Param, Route, id_param
from heddle.shared.api.answers import Triggered
from heddle.shared.api.hook_answers import Pong
from heddle.shared.broker import registry
from heddle.shared.broker.kv_reads import value_of
from heddle.shared.core import signatures
from heddle.shared.core.namespaces import DEFAULT_NAMESPACE, namespace_of, qualified
from heddle.shared.core.step_env import resolve
from heddle.shared.core.webhooks import delivery_params, delivery_run_id, header_map
from heddle.shared.wire import names
from heddle.shared.wire.contracts import Webhook, WorkflowVersion
from heddle.shared.wire.json_depth import json_depth_exceeds

MAX_DELIVERY_ID = 256  # characters of a delivery id (GitHub's is a UUID)


async def deliver(request: web.Request) -> web.Response:
    found = await _hook_of(request)
    if isinstance(found, web.Response):
        return found
    name, stored, hook = found
    raw = await _read_bounded(request)
    if isinstance(raw, web.Response):
        return raw
    if refused := await _unsigned(request, stored.name, hook.name, raw):
        return refused
    slow_clients.authenticated(request)  # signed: its connection is a sender's, as a token's
    namespace = namespace_of(stored.name)
    if request.headers.get("X-GitHub-Event", "").strip().lower() == "ping":
        return answers.json_response(Pong(workflow=name, namespace=namespace, hook=hook.name))
    wait = request.app[HOOK_RATE].take(f"{stored.name}\x00{hook.name}", time.monotonic())
    if wait is not None:
        limit = request.app[SETTINGS].webhook_rate
        response = answers.error(
            429, f"webhook {hook.name!r} takes {limit} deliveries a minute (HEDDLE_WEBHOOK_RATE)"
        )
        response.headers["Retry-After"] = str(max(1, int(wait + 0.999)))
        return response
    body = _json(raw)
    if isinstance(body, web.Response):
        return body
    values, problems = delivery_params(hook, body, header_map(request.headers.items()))
    if not problems:
        values, problems = resolve(stored.spec.params, values)
    if problems:
        return answers.error(400, "the delivery does not give the run its parameters", problems)
    delivery = _delivery_id(request)
    if isinstance(delivery, web.Response):
        return delivery
    if delivery is None:
        run_id = qualified(namespace, new_run_id())
    else:
        run_id = delivery_run_id(stored.name, hook.name, delivery)
    given = run_inputs.TriggerInputs(params=values)
    return await start_run(
        request, name, stored, given, run_id, "webhook", chosen_id=delivery is not None
    )


async def _hook_of(request: web.Request) -> tuple[str, WorkflowVersion, Webhook] | web.Response:
    """The workflow the path names, as given, its newest version and the hook; a 404 if
    either is unknown."""
    name = path_id(request, "workflow", "workflow name")
    hook_name = path_id(request, "hook", "webhook name")
    stored_name = qualified(asked_namespace(request) or DEFAULT_NAMESPACE, name)
    latest = await latest_of(request, stored_name)
    kv = request.app[RESOURCES].workflows
    stored = None if latest is None else await registry.get_version(kv, latest.name, latest.version)
    if stored is None:
        return answers.error(404, f"workflow {name!r} not found")
    hook = next((h for h in stored.spec.webhooks if h.name == hook_name), None)
    if hook is None:
        return answers.error(404, f"workflow {name!r} has no webhook {hook_name!r}")
    return name, stored, hook


async def _read_bounded(request: web.Request) -> bytes | web.Response:
    """The body, up to HEDDLE_WEBHOOK_MAX_BODY: a 413 as soon as it is past it (by its
    Content-Length, before reading it), a 408 if it is too slow to arrive."""
    settings = request.app[SETTINGS]
    limit = settings.webhook_max_body
    too_large = answers.error(
        413, f"a delivery's body is at most {limit} bytes (HEDDLE_WEBHOOK_MAX_BODY)"
    )
    if (request.content_length or 0) > limit:
        return too_large
    chunks: list[bytes] = []
    size = 0

    async def read() -> bool:
        nonlocal size
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                return False
            chunks.append(chunk)
        return True

    try:
        whole = await asyncio.wait_for(read(), settings.body_timeout)
    except TimeoutError:
        waited = settings.body_timeout
        message = f"the body did not arrive within {waited:g} s (HEDDLE_BODY_TIMEOUT)"
        return answers.error(408, message)
    return b"".join(chunks) if whole else too_large


async def _unsigned(
    request: web.Request, workflow: str, hook: str, raw: bytes
) -> web.Response | None:
    """The 401 of a delivery not signed with the hook's secret (or with none made yet);
    None if it is."""
    secret = await value_of(
        request.app[RESOURCES].secrets, names.secret_key(workflow, "hook", hook)
    )
    headers = request.headers
    signature = headers.get(signatures.HEDDLE_HEADER) or headers.get(signatures.GITHUB_HEADER)
    if secret is None:
        return answers.error(401, f"webhook {hook!r} has no secret yet: make one first")
    if signature is None:
        return answers.error(
            401, f"a delivery must be signed: send {signatures.HEDDLE_HEADER}: sha256=<hex>"
        )
    if not signatures.signed_by(secret.decode(), raw, signature):
        return answers.error(401, "the signature is not the body's under the hook's secret")
    return None


def _json(raw: bytes) -> Any:
    """The body as JSON, or the 400 saying it is not."""
    if json_depth_exceeds(raw):
        return answers.error(400, "the body is JSON nested too deep")
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        return answers.error(400, f"the body must be JSON (application/json): {exc}")


def _delivery_id(request: web.Request) -> str | web.Response | None:
    headers = request.headers
    delivery = headers.get(signatures.HEDDLE_DELIVERY) or headers.get(signatures.GITHUB_DELIVERY)
    if delivery is None:
        return None
    if not 0 < len(delivery) <= MAX_DELIVERY_ID or not sent_as_utf8(delivery):
        return answers.error(
            400, f"a delivery id is UTF-8 text of 1 to {MAX_DELIVERY_ID} characters"
        )
    return delivery


ROUTES = (
    Route(
        "POST",
        "/hooks/{workflow}/{hook}",
        deliver,
        operation_id="deliverWebhook",
        summary="A signed webhook delivery: start a run",
        tag="workflows",
        role=None,
        signed=True,
        answers={
            201: (Triggered, "Created"),
            200: ((Triggered, Pong), "A run with this delivery id exists already; or a ping"),
            202: (Triggered, "Accepted; not confirmed within the wait"),
        },
        params=(
            NAMESPACE,
            id_param("workflow", "workflow's name"),
            id_param("hook", "webhook's name"),
            Param(
                signatures.HEDDLE_HEADER,
                "header",
                {"type": "string", "pattern": "^sha256=[0-9a-f]{64}$"},
                "The body's HMAC-SHA256 under the hook's secret (or X-Hub-Signature-256)",
            ),
            Param(
                signatures.HEDDLE_DELIVERY,
                "header",
                {"type": "string", "minLength": 1, "maxLength": MAX_DELIVERY_ID},
                "Deliveries with the same id make one run (or X-GitHub-Delivery)",
            ),
        ),
        errors={
            401: "Not signed with the hook's secret, or no secret made yet",
            408: "The body did not arrive in time (HEDDLE_BODY_TIMEOUT)",
            409: REFUSED,
            413: "The body is over HEDDLE_WEBHOOK_MAX_BODY",
            429: "Over the hook's HEDDLE_WEBHOOK_RATE deliveries a minute (Retry-After)",
        },
        description="Authenticated by the body's signature alone (docs/webhooks.md).",
    ),
)
