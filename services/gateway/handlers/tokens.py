"""HTTP handlers for API tokens (admin only): make one, list them, revoke one.

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
from heddle.services.gateway.openapi.registry_types import (
    NewToken,
    TokenDoc,
    TokenList,
    TokenRequest,
)
from heddle.services.gateway.openapi.route import Route, id_param, links
from heddle.shared.broker.nats_types import KeyNotFoundError, KeyWrongLastSequenceError
from heddle.shared.core.tokens import (
    TokenRecord,
    new_token,
    parse_token_request,
    token_hash,
    token_record_decoder,
)
from heddle.shared.runtime.service import event
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
    )


async def create_token(request: web.Request) -> web.Response:
    parsed = parse_token_request(await inputs.read_json(request))
    if isinstance(parsed, list):
        return answers.error(400, "invalid token request", parsed)
    name, role = parsed
    token = new_token()
    record = TokenRecord(name=name, role=role, hash=token_hash(token), created_at=now_rfc3339())
    try:
        revision = await request.app[RESOURCES].tokens.create(name, msgspec.json.encode(record))
    except KeyWrongLastSequenceError:
        return answers.error(409, f"a token named {name!r} exists already")
    request.app[TOKENS].put(revision, record)
    event(log, "token made", token=name, role=role, by=_caller(request))
    body = NewToken(name=name, role=role, token=token, created_at=record.created_at)
    made = answers.json_response(body, 201)
    made.headers["Cache-Control"] = "no-store"  # the one answer that holds a token
    return made


async def list_tokens(request: web.Request) -> web.Response:
    records = request.app[TOKENS].records()
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
        example={"name": "ci", "role": "operator"},
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
