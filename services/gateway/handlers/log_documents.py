"""The two JSON documents of step logs, written as their lines are read, never built whole:
the step with its attempts' tails (``GET /api/runs/{run}/steps/{step}``) and every line
after a cursor (``.../logs``). services/gateway/handlers/logs.py reads what comes before the lines
and calls these; the lines are read here, one attempt after the other, in batches of about
a thousand, each written (and waited for, when the client reads slowly) before the next is
read.

A NATS timeout or error while the lines are written closes the connection: the status line
is sent, so only an incomplete body can say that the answer is not whole.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from heddle.services.gateway.http.scope import run_names
from heddle.services.gateway.reads.log_lines import Line, attempt_runners, encode_json, shown
from heddle.services.gateway.reads.log_reader import replay
from heddle.services.gateway.reads.log_tail import StepTails, tail_lines
from heddle.shared.broker.nats_types import NatsError
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepRecord

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import JetStreamContext

log = logging.getLogger("heddle.gateway")


async def write_step(
    request: web.Request, js: JetStreamContext, head: dict[str, Any], tails: StepTails
) -> web.StreamResponse:
    """The step document, its attempts' lines written as they are read, one attempt after
    the other. ``truncated`` follows a group's lines: it compares the count with them."""

    async def body(resp: web.StreamResponse) -> None:
        out = encode_json(head)[:-1] + b',"logs":['
        for i, where in enumerate(tails.attempts):
            group: dict[str, Any] = {"attempt": where.attempt, "lineCount": where.count}
            if where.expired:
                group["expired"] = True
            out += (b"," if i else b"") + encode_json(group)[:-1] + b',"lines":['
            await resp.write(out)
            async with contextlib.aclosing(tail_lines(js, where)) as batches:
                n, _ = await write_lines(resp, batches)
            out = b'],"truncated":%s}' % _bool(where.count > n)
        expired = _bool(tails.expired)
        await resp.write(out + b'],"logsCursor":%d,"logsExpired":%s}' % (tails.cursor, expired))

    return await stream_json(request, body)


async def dump_logs(
    request: web.Request, js: JetStreamContext, run_id: str, step: StepRecord, after: int, end: int
) -> web.StreamResponse:
    """Every line of the step after cursor ``after`` up to ``end`` as one JSON document,
    written as it is read."""
    subject = names.log_step_filter(run_id, step.id)
    runners = attempt_runners(step)

    async def body(resp: web.StreamResponse) -> None:
        head = {
            **run_names(run_id),
            "stepId": step.id,
            "status": step.status,
            "attempt": step.attempt,
        }
        await resp.write(encode_json(head)[:-1] + b',"lines":[')
        lines = replay(js, subject, after, end, lambda subj: shown(subj, runners))
        async with contextlib.aclosing(lines) as batches:
            n, cursor = await write_lines(resp, batches)
        expired = _bool(bool(step.attempts) and end == 0)
        await resp.write(b'],"cursor":%d,"logsExpired":%s}' % (cursor if n else after, expired))

    return await stream_json(request, body)


async def stream_json(
    request: web.Request, body: Callable[[web.StreamResponse], Awaitable[None]]
) -> web.StreamResponse:
    """A JSON answer whose ``body`` writes it as it reads it (chunked)."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    try:
        await resp.prepare(request)
        await body(resp)
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client went away
    except (TimeoutError, NatsError) as exc:  # nats.errors.TimeoutError is both
        cut_short(request, exc)
    return resp


async def write_lines(
    resp: web.StreamResponse, batches: AsyncIterator[list[Line]]
) -> tuple[int, int]:
    """The lines of ``batches`` as the items of a JSON array, written as they come; how
    many, and the last one's cursor (0 if none)."""
    n = cursor = 0
    async for batch in batches:
        body = encode_json(batch)[1:-1]
        await resp.write(b"," + body if n else body)
        n += len(batch)
        cursor = batch[-1].cursor
    return n, cursor


def _bool(value: bool) -> bytes:
    return b"true" if value else b"false"


def cut_short(request: web.Request, exc: Exception) -> None:
    """NATS failed after the answer began: close the connection, so the client sees an
    incomplete body rather than a complete, valid but wrong one."""
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    log.warning("%s %s cut short, NATS failed: %s", request.method, request.path, what)
    request.protocol.force_close()
