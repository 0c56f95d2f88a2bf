"""HTTP handlers. They validate, send commands, and read state; they own nothing."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import msgspec
from aiohttp import web
from heddle.services.gateway.api_types import ErrorDoc, ProblemDoc, StatusDoc, Submitted
from heddle.services.gateway.keys import NATS, RESOURCES, SETTINGS
from heddle.services.gateway.pods import pod_documents
from heddle.services.gateway.reads import get_run_record, pool_document
from heddle.shared.broker.documents import carried, drop_document, put_document
from heddle.shared.broker.nats_types import NatsError, NatsTimeout
from heddle.shared.core.step_env import inline_values
from heddle.shared.core.validation import Limits, check_id, parse_run_request
from heddle.shared.runtime.gc_pause import gc_paused
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import TERMINAL_RUN, CancelRun, SubmitRun, encode
from heddle.shared.wire.errors import DocumentTooLarge, InvalidWorkflow, Problem
from heddle.shared.wire.json_depth import MAX_JSON_DEPTH, json_depth_exceeds
from heddle.shared.wire.timefmt import now_rfc3339


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(body), status=status, content_type="application/json"
    )


# An answer lists this many problems at most: a small document can hold millions of them.
MAX_LISTED_PROBLEMS = 1000


def error_body(message: str, problems: list[Problem] | None = None, **extra: Any) -> bytes:
    """The one shape of every error answer (``ErrorDoc``): ``error``, then ``problems``
    (the first MAX_LISTED_PROBLEMS; ``problemsNotListed`` counts the rest)."""
    listed: list[ProblemDoc] | msgspec.UnsetType = msgspec.UNSET
    if problems is not None:
        shown = problems[:MAX_LISTED_PROBLEMS]
        listed = [ProblemDoc(path=p.path, message=p.message) for p in shown]
        if len(problems) > MAX_LISTED_PROBLEMS:
            extra["problems_not_listed"] = len(problems) - MAX_LISTED_PROBLEMS
    return encode(ErrorDoc(error=message, problems=listed, **extra))


def error(
    http_status: int, message: str, problems: list[Problem] | None = None, **extra: Any
) -> web.Response:
    return web.Response(
        body=error_body(message, problems, **extra),
        status=http_status,
        content_type="application/json",
    )


def bad_request(message: str, problems: list[Problem] | None = None) -> web.HTTPBadRequest:
    """The 400 as an exception, for helpers that cannot return an answer."""
    text = error_body(message, problems).decode()
    return web.HTTPBadRequest(text=text, content_type="application/json")


# The server counts a message's headers in its limit (and drops the connection past it);
# the client checks only the payload. So documents leave room for the headers.
HEADER_ROOM = 1024


def payload_limit(request: web.Request) -> int:
    """The most bytes a document the gateway publishes or writes may encode to."""
    return request.app[NATS].max_payload - HEADER_ROOM


def too_large(exc: DocumentTooLarge) -> web.Response:
    return error(413, str(exc), [Problem(exc.path, "too large")])


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


def new_run_id() -> str:
    # Sortable by creation time, unique without coordination.
    return f"{int(time.time() * 1000):x}-{secrets.token_hex(4)}"


async def create_run(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    doc = await read_json(request)
    try:
        with gc_paused():
            req = parse_run_request(doc, limits(settings))
    except InvalidWorkflow as exc:
        return error(400, "invalid workflow", exc.problems)
    chosen = req.run_id or req.workflow_id
    run_id = chosen or new_run_id()
    cmd = SubmitRun(
        run_id=run_id,
        steps=req.steps,
        submitted_at=now_rfc3339(),
        workflow_name=req.name,
        params=inline_values(req.params),
        env=req.env,
    )
    return await submit(request, cmd, chosen_id=chosen is not None)


async def submit(request: web.Request, cmd: SubmitRun, chosen_id: bool = True) -> web.Response:
    """Send a submit command; answer 201 once the orchestrator stored the run, 200 if it
    existed already, 202 if the orchestrator did not confirm in time (it will create it) or
    the run is carried beside its command (too big to wait for).
    A run id the client chose is looked up too: the stream's duplicate window (120 s)
    and the orchestrator's memory of finished runs are both shorter than a run's life. The
    look-up goes with the command, not before it (a round trip less before the run starts):
    the orchestrator stores nothing for a run that exists, and a record this command
    created is told from an older one by its creation time. A big run is looked up first,
    so that no document is stored for a run that exists."""
    nc = request.app[NATS]
    res = request.app[RESOURCES]
    settings = request.app[SETTINGS]
    payload = encode(cmd)
    limit = payload_limit(request)
    run_id = cmd.run_id
    ref = None
    big = carried(len(payload), limit)
    if chosen_id and big:
        existing = await get_run_record(res.runs, run_id)
        if existing is not None:
            return json_response(Submitted(run_id=run_id, status=existing.status, created=False))
    if big:  # the command names its document
        ref = await put_document(res.js, run_id, payload, limit)
        payload = encode(
            SubmitRun(run_id=run_id, steps=[], submitted_at=cmd.submitted_at, document=ref)
        )
    stored = await nc.subscribe(names.run_stored(run_id), max_msgs=1)
    looked_up = None
    if chosen_id and not big:
        looked_up = asyncio.ensure_future(get_run_record(res.runs, run_id))
        looked_up.add_done_callback(_retrieved)
    try:
        ack = await res.js.publish(
            names.cmd_submit(run_id), payload, headers={"Nats-Msg-Id": names.submit_msg_id(run_id)}
        )
        if looked_up is not None:
            existing = await looked_up
            if existing is not None and existing.created_at != cmd.submitted_at:
                status = existing.status
                return json_response(Submitted(run_id=run_id, status=status, created=False))
        if ack.duplicate and ref is not None:
            await drop_document(res.js, ref)  # the orchestrator never sees this command
        if ack.duplicate and (existing := await get_run_record(res.runs, run_id)) is not None:
            return json_response(Submitted(run_id=run_id, status=existing.status, created=False))
        if ref is not None:
            # A big run takes the orchestrator longer to store than a client should wait:
            # its command is durable now, and that is the answer.
            return json_response(Submitted(run_id=run_id, status="accepted"), 202)
        try:
            await stored.next_msg(timeout=settings.submit_confirm_timeout)
        except (NatsTimeout, TimeoutError):
            return json_response(Submitted(run_id=run_id, status="accepted"), 202)
    finally:
        await stored.unsubscribe()
        if looked_up is not None and not looked_up.done():
            looked_up.cancel()  # the publish failed: its answer is not needed
    return json_response(Submitted(run_id=run_id, status="running", created=True), 201)


def _retrieved(task: asyncio.Future) -> None:
    """A look-up left behind by a failed publish: its failure is not a stray warning."""
    if not task.cancelled():
        task.exception()


async def cancel_run(request: web.Request) -> web.Response:
    run_id = path_id(request, "run", "run id")
    res = request.app[RESOURCES]
    run = await get_run_record(res.runs, run_id)
    if run is None:
        return error(404, f"run {run_id!r} not found")
    if run.status == "cancelled":
        return json_response(Submitted(run_id=run_id, status="cancelled"))
    if run.status in TERMINAL_RUN:
        return error(409, f"run {run_id!r} already finished: {run.status}", status=run.status)
    await res.js.publish(
        names.cmd_cancel(run_id),
        encode(CancelRun(run_id=run_id, requested_at=now_rfc3339())),
        headers={"Nats-Msg-Id": f"cancel.{run_id}"},
    )
    return json_response(Submitted(run_id=run_id, status="cancelling"), 202)


async def get_runners(request: web.Request) -> web.Response:
    res = request.app[RESOURCES]
    pool = await pool_document(res.runners, res.runs)
    pool.pods = await pod_documents(res.pods, pool.runners)
    return json_response(pool)


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
