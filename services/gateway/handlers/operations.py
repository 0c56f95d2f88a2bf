"""What operators and their tools ask of the process: ``GET /healthz`` (alive),
``GET /readyz`` (NATS answers) and ``GET /metrics`` (Prometheus, http/metrics.py)."""

from __future__ import annotations

import asyncio

from aiohttp import web
from heddle.services.gateway.http.answers import error, json_response
from heddle.services.gateway.http.keys import METRICS, NATS
from heddle.services.gateway.http.metrics import CONTENT_TYPE
from heddle.services.gateway.openapi.route import OPEN, Route
from heddle.shared.api.answers import StatusDoc
from heddle.shared.broker.nats_types import NatsError


async def healthz(request: web.Request) -> web.Response:
    return json_response(StatusDoc(status="ok"))


async def readyz(request: web.Request) -> web.Response:
    nc = request.app[NATS]
    if not nc.is_connected:
        return error(503, "NATS is not reachable")
    try:
        await asyncio.wait_for(nc.flush(), 2.0)
    except (TimeoutError, NatsError) as exc:  # no pong in time, or the connection closed
        return error(503, f"NATS is not answering: {exc}")
    return json_response(StatusDoc(status="ready"))


async def metrics(request: web.Request) -> web.Response:
    body = await request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


ROUTES = (
    Route(
        "GET",
        "/healthz",
        healthz,
        operation_id="health",
        summary="Is the process alive",
        tag="operations",
        role=OPEN,
        answers={200: (StatusDoc, "Alive")},
        offline=True,
        host_free=True,
    ),
    Route(
        "GET",
        "/readyz",
        readyz,
        operation_id="ready",
        summary="Can it serve: is NATS answering",
        tag="operations",
        role=OPEN,
        answers={200: (StatusDoc, "Ready")},
        host_free=True,
    ),
    Route(
        "GET",
        "/metrics",
        metrics,
        operation_id="metrics",
        summary="Prometheus metrics",
        tag="operations",
        role=OPEN,  # or viewer, with HEDDLE_METRICS_AUTH=token (http/auth.py)
        answers={200: ("text/plain", "The text exposition format")},
        offline=True,
        host_free=True,
    ),
)
