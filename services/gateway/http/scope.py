"""The namespace of a request and the caller's right to it, as handlers ask for them: the
one adapter over shared/core/namespace_access.py, so that no handler decides either.

- ``object_scope``: a route on one object (a run, a workflow, a semaphore). A namespace the
  caller may not see answers as its object would if it did not exist: the handler is told
  (``Scope.seen`` false) and answers its own not-found, byte for byte.
- ``namespace_scope``: a route that creates in a namespace or lists one; an unseen namespace
  is a 404 naming it, the same whether it exists or not.
- ``listed_namespaces``: what a list shows, every namespace seen or the one asked for.

A role too low where the caller sees the namespace is a 403 naming role and namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from heddle.services.gateway.http.answers import bad_request, error_body
from heddle.services.gateway.http.inputs import path_id
from heddle.services.gateway.http.keys import CALLER, NEEDS, RESOURCES
from heddle.services.gateway.reads.runs import get_run_record
from heddle.shared.broker.kv_reads import value_of
from heddle.shared.core.namespace_access import (
    Grants,
    access,
    caller_grants,
    listed,
    request_namespace,
    role_there,
)
from heddle.shared.core.namespaces import (
    DEFAULT_NAMESPACE,
    namespace_problems,
    qualified,
    split_qualified,
)
from heddle.shared.core.tokens import ROLES, Role
from heddle.shared.wire.contracts import RunRecord
from heddle.shared.wire.errors import Problem


@dataclass(frozen=True, slots=True)
class Scope:
    """The namespace a request means, and whether the caller may see it."""

    namespace: str
    seen: bool = True

    def stored(self, name: str) -> str:
        """``name`` as the system stores it (shared/core/namespaces.py)."""
        return qualified(self.namespace, name)


def grants_of(request: web.Request) -> Grants:
    return caller_grants(request.get(CALLER))


def asked_namespace(request: web.Request, body: object = None) -> str | None:
    """The namespace a request names: the body's ``namespace``, else ``?namespace=``; a 400
    if it is not a namespace's name."""
    asked = body.get("namespace") if isinstance(body, dict) else None
    if asked is None:
        asked = request.query.get("namespace")
    if asked is None:
        return None
    problems = namespace_problems(asked)
    if problems:
        raise bad_request("invalid namespace", problems)
    return str(asked)


async def exists(request: web.Request, namespace: str) -> bool:
    """Whether a namespace exists: ``default`` always, another once it has a record."""
    if namespace == DEFAULT_NAMESPACE:
        return True
    return await value_of(request.app[RESOURCES].namespaces, namespace) is not None


def _too_low(granted: Grants, namespace: str, needs: Role) -> web.HTTPForbidden:
    role = role_there(granted, namespace)
    message = f"this needs the {needs} role in namespace {namespace!r}; the token has {role}"
    body = error_body(message, needs=needs, role=role)
    return web.HTTPForbidden(text=body.decode(), content_type="application/json")


def unknown_namespace(namespace: str) -> web.HTTPNotFound:
    problem = Problem("namespace", f"namespace {namespace!r} does not exist")
    body = error_body(problem.message, [problem])
    return web.HTTPNotFound(text=body.decode(), content_type="application/json")


def needs_of(request: web.Request) -> Role:
    """The route's least role (declared once, with the route; auth.py keeps it)."""
    needs = request.get(NEEDS, "viewer")
    return next(r for r in ROLES if r == needs)


def object_scope(request: web.Request) -> Scope:
    """The scope of a route on one object; unseen (``seen`` false) where the caller may not
    see the namespace. Whether the namespace exists needs no look-up: no object is in one
    that does not."""
    granted = grants_of(request)
    needs = needs_of(request)
    namespace = request_namespace(asked_namespace(request), granted)
    verdict = access(granted, namespace, needs)
    if verdict == "too-low":
        raise _too_low(granted, namespace, needs)
    return Scope(namespace, seen=verdict == "allowed")


async def namespace_scope(request: web.Request, body: object = None) -> Scope:
    """The scope of a route that writes in a namespace (``body``'s ``namespace`` first): a
    404 naming it if the caller may not see it or it does not exist."""
    granted = grants_of(request)
    needs = needs_of(request)
    namespace = request_namespace(asked_namespace(request, body), granted)
    verdict = access(granted, namespace, needs, exists=await exists(request, namespace))
    if verdict == "unseen":
        raise unknown_namespace(namespace)
    if verdict == "too-low":
        raise _too_low(granted, namespace, needs)
    return Scope(namespace)


async def listed_namespaces(request: web.Request) -> frozenset[str] | None:
    """The namespaces a list shows (None: all): the one ``?namespace=`` names (a 404 as an
    unknown one if the caller may not see it), else every one the caller sees."""
    asked = asked_namespace(request)
    if asked is not None:
        await namespace_scope(request)
    return listed(grants_of(request), asked)


def run_names(stored: str) -> dict[str, str]:
    """A run's ``runId`` and ``namespace`` as a document written by hand shows them."""
    namespace, own = split_qualified(stored)
    return {"runId": own, "namespace": namespace}


async def scoped_run(request: web.Request, key: str = "run") -> tuple[str, RunRecord | None]:
    """The run a path names (``{run}``), as given, and its record: None if it does not
    exist or is in a namespace the caller may not see (one answer for both)."""
    run_id = path_id(request, key, "run id")
    scope = object_scope(request)
    if not scope.seen:
        return run_id, None
    return run_id, await get_run_record(request.app[RESOURCES].runs, scope.stored(run_id))
