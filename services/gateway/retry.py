"""``POST /api/runs/{run}/retry``: a failed or cancelled run again, from its failure
(``shared/core/retries.py``). The orchestrator creates the retry and links both runs
(``retryOf`` on the new one, ``retriedBy`` on the old)."""

from __future__ import annotations

from aiohttp import web
from heddle.services.gateway import views
from heddle.services.gateway.keys import RESOURCES
from heddle.services.gateway.reads import get_run_record
from heddle.shared.broker.kv_reads import read_steps
from heddle.shared.core.retries import refusal, retry_command, retry_run_id
from heddle.shared.wire.timefmt import now_rfc3339


async def retry_run(request: web.Request) -> web.Response:
    run_id = views.path_id(request, "run", "run id")
    res = request.app[RESOURCES]
    run = await get_run_record(res.runs, run_id)
    if run is None:
        return views.error(404, f"run {run_id!r} not found")
    why = refusal(run)
    if why is not None:
        return views.error(409, why, status=run.status)
    if run.retried_by is None:
        # Its retry's id is derived: a run of that id that is not its retry takes it.
        taken = await get_run_record(res.runs, retry_run_id(run_id))
        if taken is not None and taken.retry_of != run_id:
            why = f"the id of this run's retry, {taken.run_id!r}, is taken by another run"
            return views.error(409, why, status=run.status)
    cmd = retry_command(run, await read_steps(res.runs, run), now_rfc3339())
    return await views.submit(request, cmd, chosen_id=True)


def setup_routes(app: web.Application) -> None:
    app.router.add_post("/api/runs/{run}/retry", retry_run)
