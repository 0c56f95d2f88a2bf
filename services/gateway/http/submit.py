"""The one submit path: a run's command sent to the orchestrator, and the answer that says
whether it stored it (``POST /api/runs``, a retry, a registered workflow's trigger)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Mapping
from typing import Any

import msgspec
from aiohttp import web
from heddle.services.gateway.http import answers
from heddle.services.gateway.http.answers import json_response
from heddle.services.gateway.http.inputs import payload_limit
from heddle.services.gateway.http.keys import NATS, RESOURCES, SETTINGS
from heddle.services.gateway.http.pool_check import namespace_refused
from heddle.services.gateway.http.scope import Scope
from heddle.services.gateway.http.store_check import store_refused
from heddle.services.gateway.reads.runs import get_run_record
from heddle.shared.api.answers import Submitted
from heddle.shared.broker.concurrency_store import KEYS
from heddle.shared.broker.documents import carried, drop_document, put_document
from heddle.shared.broker.nats_types import NatsTimeout
from heddle.shared.core import concurrency
from heddle.shared.core.concurrency import document_name, holder_of, would_hold
from heddle.shared.core.namespaces import namespace_of, own_name, qualified, split_qualified
from heddle.shared.wire import names
from heddle.shared.wire.contracts import Concurrency, SubmitRun, encode


def submitted(
    run_id: str, status: str, created: bool | msgspec.UnsetType = msgspec.UNSET
) -> Submitted:
    """The answer about a run asked for, its id as its namespace knows it."""
    namespace, own = split_qualified(run_id)
    return Submitted(run_id=own, namespace=namespace, status=status, created=created)


def concurrency_fields(
    scope: Scope, spec: Concurrency | None, values: Mapping[str, str], workflow: str | None
) -> dict[str, Any]:
    """A run's concurrency fields (``concurrency.submit_fields``), its key evaluated over the
    workflow's own name and kept within its namespace. ``ExpressionError`` as there."""
    fields = concurrency.submit_fields(spec, values, workflow)
    if "concurrency_key" in fields:
        fields["concurrency_key"] = scope.stored(fields["concurrency_key"])
    return fields


def new_run_id() -> str:
    # Sortable by creation time, unique without coordination.
    return f"{int(time.time() * 1000):x}-{secrets.token_hex(4)}"


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
    if refused := await namespace_refused(request, cmd) or await store_refused(request):
        return refused
    if cmd.on_limit == "refuse" and (refused := await _refused(request, cmd, chosen_id)):
        return refused
    payload = encode(cmd)
    limit = payload_limit(request)
    run_id = cmd.run_id
    ref = None
    big = carried(len(payload), limit)
    if chosen_id and big:
        existing = await get_run_record(res.runs, run_id)
        if existing is not None:
            return json_response(submitted(run_id, status=existing.status, created=False))
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
                return json_response(submitted(run_id, status=status, created=False))
        if ack.duplicate and ref is not None:
            await drop_document(res.js, ref)  # the orchestrator never sees this command
        if ack.duplicate and (existing := await get_run_record(res.runs, run_id)) is not None:
            return json_response(submitted(run_id, status=existing.status, created=False))
        if ref is not None:
            # A big run takes the orchestrator longer to store than a client should wait:
            # its command is durable now, and that is the answer.
            return json_response(submitted(run_id, status="accepted"), 202)
        try:
            await stored.next_msg(timeout=settings.submit_confirm_timeout)
        except (NatsTimeout, TimeoutError):
            return json_response(submitted(run_id, status="accepted"), 202)
    finally:
        await stored.unsubscribe()
        if looked_up is not None and not looked_up.done():
            looked_up.cancel()  # the publish failed: its answer is not needed
    return json_response(submitted(run_id, status="running", created=True), 201)


async def _refused(request: web.Request, cmd: SubmitRun, chosen_id: bool) -> web.Response | None:
    """The 409 of a run whose concurrency key is at its limit and which refuses to wait
    (``onLimit: refuse``), naming a run that holds the key; None if it may go. Two sent at
    once may both pass: the orchestrator settles that, failing the one refused."""
    res = request.app[RESOURCES]
    key = cmd.concurrency_key
    if key is None:
        return None
    doc, _ = await KEYS.read(res.concurrency, document_name(key))
    if would_hold(doc, cmd.run_id, cmd.concurrency_limit):
        return None
    if chosen_id and await get_run_record(res.runs, cmd.run_id) is not None:
        return None  # this run exists: the answer is its own (200)
    # Both within the run's namespace, as its client names them (a key may hold '=').
    holder = own_name(holder_of(doc) or "")
    key = key.removeprefix(qualified(namespace_of(cmd.run_id), ""))
    message = (
        f"concurrency key {key!r} is at its limit ({cmd.concurrency_limit}): held by run {holder}"
    )
    return answers.error(409, message, key=key, held_by=holder)


def _retrieved(task: asyncio.Future) -> None:
    """A look-up left behind by a failed publish: its failure is not a stray warning."""
    if not task.cancelled():
        task.exception()
