"""``GET /api/runners``: the runner pool, every runner and what it holds, with the runner pods
in a cluster (reads/pool.py)."""

from __future__ import annotations

from aiohttp import web
from heddle.services.gateway.http.answers import json_response
from heddle.services.gateway.http.keys import RESOURCES
from heddle.services.gateway.http.scope import grants_of
from heddle.services.gateway.openapi.route import Answer, Route
from heddle.services.gateway.reads.pool import pod_documents, pool_document
from heddle.shared.api.answers import Pool
from heddle.shared.core.namespace_access import visible
from heddle.shared.core.namespaces import in_namespaces


async def get_runners(request: web.Request) -> web.Response:
    """The pool is the whole system's, but what a runner holds is shown only to a caller who
    may see its run's namespace: to another, the runner is busy with nothing it may name."""
    res = request.app[RESOURCES]
    pool = await pool_document(res.runners, res.runs)
    seen = visible(grants_of(request))
    for doc in pool.runners:
        if doc.run_id is not None and not in_namespaces(doc.run_id, seen):
            doc.run_id = doc.step_id = doc.attempt = doc.held_since = None
    pool.leased = [lease for lease in pool.leased if in_namespaces(lease.run_id or "", seen)]
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
