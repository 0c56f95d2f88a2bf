"""The middleware that answers every error in the API's one shape and counts every request:
an aiohttp error as JSON, a write the full store refused as a 507, NATS too slow or away as
a 503 with Retry-After, anything unforeseen as a logged 500."""

from __future__ import annotations

import logging
import time

from aiohttp import web
from heddle.services.gateway.http.answers import error
from heddle.services.gateway.http.inputs import payload_limit
from heddle.services.gateway.http.keys import METRICS, SETTINGS
from heddle.services.gateway.openapi.route import Handler
from heddle.shared.broker.nats_types import (
    APIError,
    ConnectionClosedError,
    ConnectionReconnectingError,
    MaxPayloadError,
    NoRespondersError,
    OutboundBufferLimitError,
    ServiceUnavailableError,
    StaleConnectionError,
)
from heddle.shared.core.store_space import full_message, is_store_full

log = logging.getLogger("heddle.gateway")
# What NATS raises when it is too slow, reconnecting or without JetStream for a moment
# (nats.errors.TimeoutError is a TimeoutError): a 503 with Retry-After, never a 500.
NATS_UNAVAILABLE = (
    TimeoutError,
    ConnectionClosedError,
    ConnectionReconnectingError,
    NoRespondersError,
    OutboundBufferLimitError,
    StaleConnectionError,
    ServiceUnavailableError,
)
RETRY_AFTER = "1"
STORE_FULL_RETRY_AFTER = "10"  # room comes back with retention or a larger volume, not at once


@web.middleware
async def errors_and_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error answers JSON that names the problem; every request is counted."""
    t0 = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        if exc.status < 400 or (exc.status != 408 and exc.content_type == "application/json"):
            raise
        return _http_error(request, exc)
    except (APIError, *NATS_UNAVAILABLE) as exc:
        answer = _nats_error(request, exc)
        status = answer.status
        return answer
    except MaxPayloadError:  # a write no route measured first: too large, still not a 500
        status = 413
        limit = payload_limit(request)
        return error(413, f"the document is larger than NATS accepts ({limit} bytes)")
    except Exception:  # last resort: an unforeseen error is a JSON 500, logged with its trace
        log.exception("%s %s failed", request.method, request.path)
        return error(500, "internal error")
    finally:
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        request.app[METRICS].observe(request.method, name, status, time.perf_counter() - t0)


def _http_error(request: web.Request, exc: web.HTTPException) -> web.Response:
    """aiohttp's own errors in the API's shape."""
    if exc.status == 408:  # the rest of the body may still come: end the connection
        response = web.Response(status=408, body=exc.text, content_type="application/json")
        response.force_close()
        return response
    message = exc.reason
    if exc.status == 413:
        message = (
            f"request body too large: the limit is {request.app[SETTINGS].max_body_bytes} bytes"
        )
    elif exc.status == 404:
        message = f"no route for {request.path}"
    elif exc.status == 405:
        message = f"method {request.method} not allowed on {request.path}"
    response = error(exc.status, message)
    for name in ("Allow", "Retry-After"):
        if name in exc.headers:
            response.headers[name] = exc.headers[name]
    return response


def _nats_error(request: web.Request, exc: Exception) -> web.Response:
    """A write the full store refused: 507 (docs/storage.md); NATS slow or away: 503, the
    client may try again; any other JetStream error: a logged 500."""
    if isinstance(exc, APIError) and is_store_full(exc.err_code, exc.description):
        log.warning("%s %s: the store is full: %s", request.method, request.path, exc)
        response = error(507, full_message(exc.description))
        response.headers["Retry-After"] = STORE_FULL_RETRY_AFTER
        return response
    if not isinstance(exc, NATS_UNAVAILABLE):
        log.exception("%s %s failed", request.method, request.path)
        return error(500, "internal error")
    log.warning("%s %s: NATS did not answer: %r", request.method, request.path, exc)
    response = error(503, "NATS did not answer in time; try again")
    response.headers["Retry-After"] = RETRY_AFTER
    return response
