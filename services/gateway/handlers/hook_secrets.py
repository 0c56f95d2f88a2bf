"""``POST /api/workflows/{name}/webhooks/{hook}/secret`` and
``POST /api/workflows/{name}/notify/{index}/secret``: make a secret for a webhook or a
signed notify target of a registered workflow's newest version (docs/webhooks.md).

The secret is answered once and kept in heddle-secrets, which the gateway's NATS user alone
may read (shared/broker/nats_permissions.py), as its bare text. Making it again replaces it:
the old one stops working at once.
"""

from __future__ import annotations

from aiohttp import web
from heddle.services.gateway.handlers.workflows import latest_of, scoped_workflow, unknown
from heddle.services.gateway.http import answers, inputs
from heddle.services.gateway.http.keys import RESOURCES
from heddle.services.gateway.openapi.route import NAMESPACE, WORKFLOW, Param, Route, id_param
from heddle.shared.api.hook_answers import HookSecret, NotifySecret
from heddle.shared.broker import registry
from heddle.shared.core.namespaces import split_qualified
from heddle.shared.core.signatures import new_secret
from heddle.shared.wire import names
from heddle.shared.wire.contracts import WorkflowVersion

MAX_INDEX = 1000  # more than any workflow has targets: a bound for the path's number


async def newest(request: web.Request) -> tuple[str, WorkflowVersion | None]:
    """The workflow a path names, as given, and its newest version (None: unknown)."""
    name, stored_name = scoped_workflow(request)
    latest = await latest_of(request, stored_name)
    if latest is None:
        return name, None
    kv = request.app[RESOURCES].workflows
    return name, await registry.get_version(kv, latest.name, latest.version)


async def make_hook_secret(request: web.Request) -> web.Response:
    name, stored = await newest(request)
    if stored is None:
        return unknown(name)
    hook = inputs.path_id(request, "hook", "webhook name")
    if hook not in {h.name for h in stored.spec.webhooks}:
        return answers.error(404, f"workflow {name!r} has no webhook {hook!r}")
    secret = await _remade(request, names.secret_key(stored.name, "hook", hook))
    namespace = split_qualified(stored.name)[0]
    body = HookSecret(workflow=name, namespace=namespace, hook=hook, secret=secret)
    return answers.json_response(body, 201)


async def make_notify_secret(request: web.Request) -> web.Response:
    name, stored = await newest(request)
    if stored is None:
        return unknown(name)
    text = request.match_info["index"]
    index = int(text) if text.isascii() and text.isdigit() and len(text) <= 4 else -1
    targets = stored.spec.notify
    if not 0 <= index < len(targets):
        return answers.error(404, f"workflow {name!r} has no notify target {text!r}")
    if not targets[index].secret:
        message = f"notify target {index} of {name!r} is not signed: register it with secret: true"
        return answers.error(409, message)
    secret = await _remade(request, names.secret_key(stored.name, "notify", str(index)))
    namespace = split_qualified(stored.name)[0]
    body = NotifySecret(workflow=name, namespace=namespace, index=index, secret=secret)
    return answers.json_response(body, 201)


async def _remade(request: web.Request, key: str) -> str:
    secret = new_secret()
    await request.app[RESOURCES].secrets.put(key, secret.encode())
    return secret


HOOK = id_param("hook", "webhook's name")
INDEX = Param(
    "index", "path", {"type": "integer", "minimum": 0, "maximum": MAX_INDEX}, "Its place in notify"
)
ROUTES = (
    Route(
        "POST",
        "/api/workflows/{name}/webhooks/{hook}/secret",
        make_hook_secret,
        operation_id="makeHookSecret",
        summary="Make a webhook's secret (replacing the old)",
        tag="workflows",
        role="admin",
        answers={201: (HookSecret, "The new secret, shown this once")},
        params=(NAMESPACE, WORKFLOW, HOOK),
        body_required=False,
    ),
    Route(
        "POST",
        "/api/workflows/{name}/notify/{index}/secret",
        make_notify_secret,
        operation_id="makeNotifySecret",
        summary="Make a signed notify target's secret (replacing the old)",
        tag="workflows",
        role="admin",
        answers={201: (NotifySecret, "The new secret, shown this once")},
        params=(NAMESPACE, WORKFLOW, INDEX),
        body_required=False,
        errors={409: "The target is not signed (its secret is false)"},
    ),
)
