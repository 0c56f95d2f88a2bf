"""``GET /api/runners``: the runner pool, every runner and what it holds, with the runner pods
in a cluster (reads/pool.py)."""

from __future__ import annotations

from aiohttp import web

from services.gateway.http.answers import json_response
from services.gateway.http.keys import RESOURCES
from services.gateway.reads.pool import pod_documents, pool_document


async def get_runners(request: web.Request) -> web.Response:
    res = request.app[RESOURCES]
    pool = await pool_document(res.runners, res.runs)
    pool.pods = await pod_documents(res.pods, pool.runners)
    return json_response(pool)


def setup_routes(app: web.Application) -> None:
    app.router.add_get("/api/runners", get_runners)
    app.router.add_get("/pods", get_runners)  # its older name
