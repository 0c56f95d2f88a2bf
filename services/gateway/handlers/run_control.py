"""A run's course changed: ``POST /api/runs/{run}/cancel`` stops it (running steps are
stopped, the rest skipped), and ``POST /api/runs/{run}/retry`` runs a failed or cancelled run
again, from its failure (``shared/core/retries.py``). The orchestrator does either from a command;
for a retry it creates the new run and links both (``retryOf`` on the new one, ``retriedBy``
on the old)."""

from __future__ import annotations

from aiohttp import web
from heddle.services.gateway.http import answers
from heddle.services.gateway.http.keys import RESOURCES
from heddle.services.gateway.http.scope import scoped_run
from heddle.services.gateway.http.submit import submit, submitted
from heddle.services.gateway.openapi.route import NAMESPACE, RUN, Route
from heddle.services.gateway.reads.runs import get_run_record
from heddle.shared.api.answers import Submitted
from heddle.shared.broker.kv_reads import read_steps
from heddle.shared.core.namespaces import own_name
from heddle.shared.core.retries import refusal, retry_command, retry_run_id
from heddle.shared.wire import names
from heddle.shared.wire.contracts import TERMINAL_RUN, CancelRun, encode
from heddle.shared.wire.timefmt import now_rfc3339


async def cancel_run(request: web.Request) -> web.Response:
    run_id, run = await scoped_run(request)
    res = request.app[RESOURCES]
    if run is None:
        return answers.error(404, f"run {run_id!r} not found")
    if run.status == "cancelled":
        return answers.json_response(submitted(run.run_id, "cancelled"))
    if run.status in TERMINAL_RUN:
        message = f"run {run_id!r} already finished: {run.status}"
        return answers.error(409, message, status=run.status)
    stored = run.run_id
    await res.js.publish(
        names.cmd_cancel(stored),
        encode(CancelRun(run_id=stored, requested_at=now_rfc3339())),
        # A second cancel stops the exit handlers a first one let run: a message of its own.
        headers={"Nats-Msg-Id": f"cancel.{stored}" + (".again" if run.cancel_requested else "")},
    )
    return answers.json_response(submitted(stored, "cancelling"), 202)


async def retry_run(request: web.Request) -> web.Response:
    run_id, run = await scoped_run(request)
    res = request.app[RESOURCES]
    if run is None:
        return answers.error(404, f"run {run_id!r} not found")
    why = refusal(run)
    if why is not None:
        return answers.error(409, why, status=run.status)
    if run.retried_by is None:
        # Its retry's id is derived: a run of that id that is not its retry takes it.
        taken = await get_run_record(res.runs, retry_run_id(run.run_id))
        if taken is not None and taken.retry_of != run.run_id:
            why = f"the id of this run's retry, {own_name(taken.run_id)!r}, is taken by another run"
            return answers.error(409, why, status=run.status)
    cmd = retry_command(run, await read_steps(res.runs, run), now_rfc3339())
    return await submit(request, cmd, chosen_id=True)


ROUTES = (
    Route(
        "POST",
        "/api/runs/{run}/cancel",
        cancel_run,
        operation_id="cancelRun",
        summary="Cancel a run",
        tag="runs",
        role="operator",
        answers={
            200: (Submitted, "It was cancelled already"),
            202: (Submitted, "Cancelling: running steps are stopped, the rest skipped"),
        },
        params=(
            NAMESPACE,
            RUN,
        ),
        errors={409: "The run finished already (`status` says how)"},
    ),
    Route(
        "POST",
        "/api/runs/{run}/retry",
        retry_run,
        operation_id="retryRun",
        summary="Run a failed or cancelled run again from its failure",
        tag="runs",
        role="operator",  # the run's own commands again
        answers={
            201: (Submitted, "The retry, created: succeeded steps carried over, the rest run"),
            200: (Submitted, "The run was retried already: its retry"),
            202: (Submitted, "Accepted; the orchestrator had not confirmed it within the wait"),
        },
        params=(
            NAMESPACE,
            RUN,
        ),
        errors={
            409: (
                "The run is still running or succeeded (`status` says which), or its "
                "concurrency key is at its limit and its onLimit is refuse (`heldBy`)"
            )
        },
    ),
)
