"""The gateway's checks on every request, in one middleware, in this order:

1. **Host**: the Host header must name this gateway (``HEDDLE_ALLOWED_HOSTS``, see
   shared/core/hosts.py), or 421. The routes declared ``host_free`` skip it (``/healthz``,
   ``/readyz`` and ``/metrics``): probes and Prometheus address a pod by its IP, and those
   answers hold nothing worth a rebinding.
2. **Same origin**: POST, PUT, PATCH and DELETE that a page on another origin could have
   sent get 403 (services/gateway/http/origin.py), with tokens or without.
3. **No form posts**: POST, PUT, PATCH and DELETE with a form or text/plain content type
   (what a page elsewhere can send without asking first) get 415, even with no body.
   The routes declared ``signed`` (and open) skip 2 and 3: a webhook delivery, whose
   signature under a secret no page elsewhere holds is its authentication.
4. **Token and role**: ``Authorization: Bearer <token>`` must name a token that exists and is
   not revoked (else 401), whose highest role in any namespace is at least the route's
   (else 403); its role in the request's namespace is the handler's to check
   (services/gateway/http/scope.py). A route's role is
   declared with the route, in its handler's module (``Route.role``, openapi/route.py), and
   nowhere else; a route the app serves without a declaration needs admin.

A request that passes 4 (or 1 to 3, with ``HEDDLE_AUTH=none``) takes its connection out of
the bound on unauthenticated ones (services/gateway/http/slow_clients.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from aiohttp import web
from heddle.services.gateway.http import slow_clients
from heddle.services.gateway.http.answers import error
from heddle.services.gateway.http.keys import CALLER, NEEDS, TOKENS
from heddle.services.gateway.http.origin import STATE_CHANGING, cross_origin_refusal
from heddle.services.gateway.http.params import sent_as_utf8
from heddle.services.gateway.openapi.route import Handler, Route
from heddle.shared.core.hosts import AllowedHosts
from heddle.shared.core.tokens import Role, allows, highest_role
from heddle.shared.runtime.settings import Settings

if TYPE_CHECKING:
    from aiohttp.typedefs import Middleware

log = logging.getLogger("heddle.gateway")

UNLISTED: Role = "admin"  # a route added without a role is not open by mistake
NO_ROUTE: Role = "viewer"  # a 404 or 405 is told to any token holder, not to anyone
# With HEDDLE_METRICS_AUTH=token, /metrics (declared open) needs a viewer's token.
METRICS_ROUTE = ("GET", "/metrics")
RouteKey = tuple[str, str]  # (method, route pattern)
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})


def route_of(request: web.Request) -> str | None:
    """The matched route's pattern (``/api/runs/{run}``), or None if no route matched."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else None


def route_roles(routes: Iterable[Route], settings: Settings) -> dict[RouteKey, Role | None]:
    """Each declared route's least role, under these settings (None: open)."""
    roles = {(r.method, r.path): r.role for r in routes}
    if settings.metrics_auth == "token" and METRICS_ROUTE in roles:
        roles[METRICS_ROUTE] = "viewer"
    return roles


def required_role(
    method: str, route: str | None, roles: Mapping[RouteKey, Role | None]
) -> Role | None:
    """The least role a request needs, or None if it is open. HEAD is checked as GET."""
    if route is None:
        return NO_ROUTE
    return roles.get(("GET" if method == "HEAD" else method, route), UNLISTED)


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _unauthorized(message: str, sent: bool) -> web.Response:
    response = error(401, message)
    response.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"' if sent else "Bearer"
    return response


def _check_token(request: web.Request, needs: Role) -> web.Response | None:
    """None if the request's token may call the route, else the answer that says why not.
    The token itself is never put in an answer or a log."""
    token = bearer(request.headers.get("Authorization"))
    if token is None:
        return _unauthorized("this needs a token: send Authorization: Bearer <token>", False)
    if not sent_as_utf8(token):
        return _unauthorized("the token is not UTF-8 text", True)
    record = request.app[TOKENS].lookup(token)
    if record is None:
        return _unauthorized("unknown token", True)
    if record.revoked:
        return _unauthorized(f"token {record.name!r} was revoked", True)
    has = highest_role(record)  # its role in the request's namespace is the handler's check
    if not allows(has, needs):
        message = f"this needs the {needs} role; the token has {has}"
        return error(403, message, needs=needs, role=has)
    request[CALLER] = record
    return None


def _form_refused(request: web.Request) -> web.Response | None:
    if request.method not in STATE_CHANGING or "Content-Type" not in request.headers:
        return None
    kind = request.content_type.lower()
    if kind not in FORM_TYPES:
        return None
    return error(
        415,
        f"content type {kind} is refused on {request.method}: send application/json "
        "(form and text bodies are refused, so that a page elsewhere cannot post here)",
    )


def _host_refused(request: web.Request, hosts: AllowedHosts) -> web.Response | None:
    host = request.headers.get("Host")
    if hosts.allows(host):
        return None
    # Bytes that were not UTF-8 shown escaped (\udcff), as the answer's JSON can hold them.
    shown = (host or "")[:100].encode(errors="backslashreplace").decode()
    return error(
        421,
        f"this gateway does not answer to host {shown!r}: add it to HEDDLE_ALLOWED_HOSTS",
        host=shown,
    )


def _cross_origin_refused(request: web.Request, hosts: AllowedHosts) -> web.Response | None:
    host = request.headers.get("Host")
    own = host if hosts.allows(host) else None  # /metrics and the probes skip the Host check
    reason = cross_origin_refusal(request.method, request.headers, own)
    return None if reason is None else error(403, reason)


def auth_middleware(settings: Settings, routes: Iterable[Route]) -> Middleware:
    """The checks on every request, for an app that serves ``routes``."""
    hosts = AllowedHosts(settings.allowed_hosts, settings.gateway_host)
    tokens_on = settings.auth == "tokens"
    routes = tuple(routes)
    roles = route_roles(routes, settings)
    host_free = frozenset(r.path for r in routes if r.host_free)
    signed = frozenset((r.method, r.path) for r in routes if r.signed and r.role is None)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = route_of(request)
        if route not in host_free:
            refused = _host_refused(request, hosts)
            if refused is not None:
                return refused
        if (request.method, route) not in signed:
            refused = _cross_origin_refused(request, hosts) or _form_refused(request)
            if refused is not None:
                return refused
        needs = required_role(request.method, route, roles)
        if tokens_on and needs is not None:
            refused = _check_token(request, needs)
            if refused is not None:
                return refused
        if needs is not None or not tokens_on:
            slow_clients.authenticated(request)
        request[NEEDS] = needs or "viewer"
        return await handler(request)

    return guard


def warn_if_open(settings: Settings) -> None:
    if settings.auth == "none":
        log.warning(
            "HEDDLE_AUTH=none: authentication is off, anyone who reaches this gateway may "
            "run any command through it"
        )
