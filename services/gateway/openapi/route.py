"""A route of the HTTP API, declared once, in its handler's module: what the app serves
(method, path, handler), who may call it (its role, checked by http/auth.py), and what the
OpenAPI document says of it (document.py). The app registers every declared route
(``register``); the document is built from the same records, so the two cannot drift apart.

The error statuses every operation shares (auth, Host, bodies, NATS) are added by
``document.error_statuses``; a route lists only the errors that are its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from aiohttp import web
from heddle.shared.api.answers import ID_SCHEMA_PATTERN
from heddle.shared.core.namespaces import NAMESPACE_PATTERN
from heddle.shared.core.tokens import Role

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# (a JSON type, a media type, or a tuple of them for an answer of several; its meaning)
Answer = tuple[type | str | tuple[type | str, ...] | None, str]
OPEN = None  # the role of a route anyone may call
# The document's groups of operations, in its order.
Tag = Literal[
    "runs",
    "runners",
    "semaphores",
    "namespaces",
    "workflows",
    "tokens",
    "operations",
    "page",
    "legacy",
]


@dataclass(frozen=True)
class Param:
    name: str
    where: Literal["path", "query", "header"]
    schema: dict[str, Any]
    description: str


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    _: KW_ONLY
    operation_id: str
    summary: str
    tag: Tag
    role: Role | None  # the least role that may call it (HEAD as GET); OPEN: anyone
    answers: Mapping[int, Answer]
    params: tuple[Param, ...] = ()
    body: type | None = None
    body_required: bool = True
    example: dict[str, Any] | None = None  # a valid body, for readers and the fuzzer's first run
    errors: Mapping[int, str] = field(default_factory=dict)  # this operation's own meanings
    links: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    description: str = ""
    deprecated: bool = False
    offline: bool = False  # answers without NATS: never a 503
    # No Host check: probes and Prometheus address a pod by its IP, and the answer holds
    # nothing worth a DNS rebinding.
    host_free: bool = False
    # Authenticated by its body's signature (a webhook delivery): open, and spared the
    # origin and form checks, which guard a token's or an open gateway's routes from pages
    # elsewhere; a page elsewhere cannot sign.
    signed: bool = False


def register(app: web.Application, routes: Iterable[Route]) -> None:
    """Every route on the app's router; a GET answers HEAD as well."""
    for route in routes:
        if route.method == "GET":
            app.router.add_get(route.path, route.handler)
        else:
            app.router.add_route(route.method, route.path, route.handler)


# ---- what several routes share -------------------------------------------------------------

ID = {"type": "string", "pattern": ID_SCHEMA_PATTERN}


def id_param(name: str, what: str) -> Param:
    """An id in the path (a run's, a step's, a workflow's ...)."""
    return Param(name, "path", ID, f"The {what}")


RUN = id_param("run", "run's id")
# A step's id, or a forEach instance's: its step's id and its index, ``build[3]``.
STEP = Param(
    "step",
    "path",
    {
        "type": "string",
        "pattern": ID_SCHEMA_PATTERN.removesuffix("$") + r"(\[(0|[1-9][0-9]{0,8})\])?$",
    },
    "The step's id",
)
WORKFLOW = id_param("name", "workflow's name")
RUN_STATUS = Param(
    "status",
    "query",
    {"enum": ["running", "succeeded", "failed", "cancelled"]},
    "Only runs in this state",
)
LIMIT = Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000}, "How many")
NAMESPACE = Param(
    "namespace",
    "query",
    {"type": "string", "pattern": NAMESPACE_PATTERN.pattern.replace("\\Z", "$")},
    "The namespace (docs/namespaces.md): by default the token's own if its grants name one, "
    "else default",
)
# A list's or a write's answer for a namespace the token may not see, as for one unknown.
UNKNOWN_NAMESPACE = {404: "The namespace does not exist, or the token may not see it"}
VERSION = Param(
    "version", "query", {"type": "integer", "minimum": 1, "maximum": 2**31}, "A version"
)


def links(source: str, targets: dict[str, str], **more: str) -> dict[int, dict[str, Any]]:
    """OpenAPI links from an operation's 2xx answers: ``targets`` maps an operationId to
    its path parameter, filled from ``source`` (a runtime expression); ``more`` adds
    parameters every target gets."""
    found = {
        op[0].upper() + op[1:]: {"operationId": op, "parameters": {param: source, **more}}
        for op, param in targets.items()
    }
    return {200: found, 201: found, 202: found}
