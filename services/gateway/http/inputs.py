"""What a handler reads of a request: its JSON body, an id in its path, the limits a
document is checked against, and the most bytes a document may encode to for NATS."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from aiohttp import web
from heddle.services.gateway.http.answers import bad_request, error_body
from heddle.services.gateway.http.keys import NATS, SETTINGS
from heddle.shared.core.validation import Limits, check_id
from heddle.shared.runtime.gc_pause import gc_paused
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire.errors import Problem
from heddle.shared.wire.json_depth import MAX_JSON_DEPTH, json_depth_exceeds
from heddle.shared.wire.names import is_step_id

# The server counts a message's headers in its limit (and drops the connection past it);
# the client checks only the payload. So documents leave room for the headers.
HEADER_ROOM = 1024


def payload_limit(request: web.Request) -> int:
    """The most bytes a document the gateway publishes or writes may encode to."""
    return request.app[NATS].max_payload - HEADER_ROOM


def limits(settings: Settings) -> Limits:
    return Limits(max_steps=settings.max_steps, max_command_bytes=settings.max_command_bytes)


async def read_json(request: web.Request) -> Any:
    """The request body as JSON, or an HTTP error naming what is wrong with it."""
    if request.content_type != "application/json":
        message = f"content type must be application/json, not {request.content_type or 'missing'}"
        raise web.HTTPUnsupportedMediaType(
            text=error_body(message).decode(), content_type="application/json"
        )
    limit = request.app[SETTINGS].body_timeout
    try:  # aiohttp answers 413 past client_max_size, but never times a slow body out
        raw = await asyncio.wait_for(request.read(), limit)
    except TimeoutError as exc:
        message = f"the request body did not arrive within {limit:g} s (HEDDLE_BODY_TIMEOUT)"
        raise web.HTTPRequestTimeout(
            text=error_body(message).decode(), content_type="application/json"
        ) from exc
    # Decoding recurses: refuse deep nesting before it does (a RecursionError otherwise).
    too_deep = f"JSON nested more than {MAX_JSON_DEPTH} levels deep (arrays and objects)"
    if json_depth_exceeds(raw):
        raise bad_request(too_deep)
    try:
        with gc_paused():  # a big body's objects are no garbage (shared/runtime/gc_pause.py)
            return msgspec.json.decode(raw)
    except RecursionError as exc:  # not reached when the check above is right; still a 400
        raise bad_request(too_deep) from exc
    except msgspec.DecodeError as exc:
        raise bad_request(f"malformed JSON: {exc}") from exc


def path_id(request: web.Request, key: str, what: str) -> str:
    value = request.match_info[key]
    problems: list[Problem] = []
    if not check_id(value, key, what, problems):
        raise bad_request(f"invalid {what}", problems)
    return value


def path_step_id(request: web.Request) -> str:
    """The ``{step}`` of a path: a step's id, or a forEach instance's (``build[3]``)."""
    value = request.match_info["step"]
    if is_step_id(value):
        return value
    problems: list[Problem] = []
    check_id(value, "step", "step id", problems)
    raise bad_request("invalid step id", problems)
