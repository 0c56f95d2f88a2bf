"""HTTP handlers for API tokens (admin only): make one, list them, revoke one.

The system's admin manages every token; a namespace's admin, those whose every grant lies
within the namespaces it administers (shared/core/namespace_access.py): it sees no other,
and revoking another answers as for a token that does not exist.

A new token is in the answer to ``POST /api/tokens`` and nowhere else: the bucket keeps its
hash, and no list or error shows it. Writes go to the heddle-tokens bucket by create and
compare-and-set, so two gateways cannot both make a name or lose a revocation; the writing
gateway applies the record to its own index at once, the others through their watches.
"""

from __future__ import annotations

import logging

import msgspec
from aiohttp import web
from heddle.services.gateway.http import answers, inputs
from heddle.services.gateway.http.keys import CALLER, RESOURCES, TOKENS
from heddle.services.gateway.http.scope import exists, grants_of
from heddle.services.gateway.openapi.route import Route, id_param, links
from heddle.shared.api.registry_answers import (
    NewToken,
    TokenDoc,
    TokenList,
    TokenRequest,
)
from heddle.shared.broker.nats_types import KeyNotFoundError, KeyWrongLastSequenceError
from heddle.shared.core.namespace_access import administered, manages, ungrantable
from heddle.shared.core.namespaces import namespace_problems
from heddle.shared.core.tokens import (
    TokenRecord,
    grants,
    is_system_admin,
    new_token,
    parse_token_request,
    token_hash,
    token_record_decoder,
)
from heddle.shared.runtime.service import event
from heddle.shared.wire.errors import Problem
from heddle.shared.wire.timefmt import now_rfc3339

log = logging.getLogger("heddle.gateway")
REVOKE_TRIES = 5  # compare-and-set rounds against concurrent writers of the same record


def _caller(request: web.Request) -> str | None:
    """The name of the token a request came with (None with HEDDLE_AUTH=none)."""
    caller = request.get(CALLER)
    return caller.name if caller is not None else None


def token_document(r: TokenRecord) -> TokenDoc:
    """A record as the API shows it: never its hash."""
    return TokenDoc(
        name=r.name,
        role=r.role,
        created_at=r.created_at,
        revoked=r.revoked,
        revoked_at=r.revoked_at,
        namespaces=grants(r) or {},
        system_admin=is_system_admin(r),
    )


async def unknown_namespaces(request: web.Request, doc: object) -> list[Problem]:
    """A problem for each well-formed namespace of the request that does not exist, among
    those the caller administers (another is refused as not the caller's to grant)."""
    asked = doc.get("namespaces") if isinstance(doc, dict) else None
    if not isinstance(asked, dict):
        return []
    mine = administered(grants_of(request))
    return [
        Problem(f"namespaces.{ns}", f"namespace {ns!r} does not exist")
        for ns in asked
        if not namespace_problems(ns)
        and (mine is None or ns in mine)
        and not await exists(request, ns)
    ]


def refusal(request: web.Request, wanted: TokenRecord) -> web.Response | None:
    """The 403 of a token the caller may not make, naming the namespaces it may not grant."""
    refused = ungrantable(grants_of(request), grants(wanted))
    if not refused:
        return None
    if refused == ["*"]:
        return answers.error(403, "only the system's admin makes a token for every namespace")
    listed = ", ".join(repr(ns) for ns in refused)
    return answers.error(403, f"this token is not admin in namespace {listed}: it cannot grant it")


async def create_token(request: web.Request) -> web.Response:
    doc = await inputs.read_json(request)
    parsed = parse_token_request(doc)
    problems = (parsed if isinstance(parsed, list) else []) + await unknown_namespaces(request, doc)
    if problems or isinstance(parsed, list):
        return answers.error(400, "invalid token request", problems)
    name, role, namespaces = parsed
    token = new_token()
    record = TokenRecord(
        name=name,
        role=role,
        hash=token_hash(token),
        created_at=now_rfc3339(),
        namespaces=namespaces,
    )
    if (refused := refusal(request, record)) is not None:
        return refused
    try:
        revision = await request.app[RESOURCES].tokens.create(name, msgspec.json.encode(record))
    except KeyWrongLastSequenceError:
        return answers.error(409, f"a token named {name!r} exists already")
    request.app[TOKENS].put(revision, record)
    event(log, "token made", token=name, role=role, by=_caller(request))
    body = NewToken(
        name=name, role=role, token=token, created_at=record.created_at, namespaces=namespaces
    )
    made = answers.json_response(body, 201)
    made.headers["Cache-Control"] = "no-store"  # the one answer that holds a token
    return made


async def list_tokens(request: web.Request) -> web.Response:
    granted = grants_of(request)
    records = [r for r in request.app[TOKENS].records() if manages(granted, r)]
    return answers.json_response(TokenList(tokens=[token_document(r) for r in records]))


async def revoke_token(request: web.Request) -> web.Response:
    name = inputs.path_id(request, "name", "token name")
    kv = request.app[RESOURCES].tokens
    for _ in range(REVOKE_TRIES):
        try:
            entry = await kv.get(name)
        except KeyNotFoundError:
            return answers.error(404, f"token {name!r} not found")
        record = token_record_decoder.decode(entry.value or b"")
        if not manages(grants_of(request), record):  # as a token that does not exist
            return answers.error(404, f"token {name!r} not found")
        if record.revoked:  # revoking twice changes nothing
            return answers.json_response(token_document(record))
        revoked = msgspec.structs.replace(record, revoked=True, revoked_at=now_rfc3339())
        try:
            revision = await kv.update(name, msgspec.json.encode(revoked), last=entry.revision)
        except KeyWrongLastSequenceError:
            continue  # written meanwhile (revoked by another gateway?): read it again
        request.app[TOKENS].put(revision, revoked)
        event(log, "token revoked", token=name, role=record.role, by=_caller(request))
        return answers.json_response(token_document(revoked))
    busy = answers.error(503, f"token {name!r} kept changing; try again")
    busy.headers["Retry-After"] = "1"
    return busy


ROUTES = (
    Route(
        "POST",
        "/api/tokens",
        create_token,
        operation_id="createToken",
        summary="Make an API token",
        tag="tokens",
        role="admin",
        answers={201: (NewToken, "The token: shown once, never again")},
        body=TokenRequest,
        links=links("$response.body#/name", {"revokeToken": "name"}),
        errors={409: "A token of that name exists already"},
        example={"name": "ci", "namespaces": {"team-a": "operator", "team-b": "viewer"}},
    ),
    Route(
        "GET",
        "/api/tokens",
        list_tokens,
        operation_id="listTokens",
        summary="API tokens (never their secrets)",
        tag="tokens",
        role="admin",
        answers={200: (TokenList, "Every token")},
        offline=True,
    ),
    Route(
        "POST",
        "/api/tokens/{name}/revoke",
        revoke_token,
        operation_id="revokeToken",
        summary="Revoke an API token",
        tag="tokens",
        role="admin",
        answers={200: (TokenDoc, "Revoked (or it was already)")},
        params=(id_param("name", "token's name"),),
    ),
)
