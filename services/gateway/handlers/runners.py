"""``GET /api/runners``: the runner pool, every runner and what it holds, with the runner pods
in a cluster (reads/pool.py)."""

from __future__ import annotations

from aiohttp import web
from heddle.services.gateway.http.answers import json_response
from heddle.services.gateway.http.keys import RESOURCES
from heddle.services.gateway.openapi.route import Answer, Route
from heddle.services.gateway.openapi.types import Pool
from heddle.services.gateway.reads.pool import pod_documents, pool_document


async def get_runners(request: web.Request) -> web.Response:
    res = request.app[RESOURCES]
    pool = await pool_document(res.runners, res.runs)
    pool.pods = await pod_documents(res.pods, pool.runners)
    return json_response(pool)


POOL: Answer = (Pool, "Every runner and what it holds")
ROUTES = (
    Route(
        "GET",
        "/api/runners",
        get_runners,
        operation_id="listRunners",
        summary="The runner pool",
        tag="runners",
        role="viewer",
        answers={200: POOL},
    ),
    Route(
        "GET",
        "/pods",
        get_runners,
        operation_id="listPods",
        summary="The runner pool (older name)",
        tag="legacy",
        role="viewer",
        answers={200: POOL},
        deprecated=True,
    ),
)
