"""``GET /api/runs/{run}/events``: a run's state changes as server-sent events, ending when
the run does, so that a script, the page or the bench is told instead of polling.

The stream opens with the current state of the run and of every step (so a client that
reconnects needs no cursor), then sends each change as it is stored:

- ``event: step``: a step's new state (``StepChange``), once per status and attempt;
- ``event: run``: the run's new state (``RunChange``);
- ``event: end``: the run is terminal (``RunEnd``, with its step counts); the stream ends.

The changes come from two KV watches of heddle-runs (the run's record and its step
records). When the run record turns terminal, the step records are read once more, so no
step's last state is missed whichever watch was behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

import msgspec
from aiohttp import web

from services.gateway import sse
from services.gateway.api_types import RunChange, RunEnd, StepChange
from services.gateway.keys import RESOURCES
from services.gateway.reads import get_run_record
from services.gateway.views import error, path_id
from shared import names
from shared.contracts import (
    TERMINAL_RUN,
    RunRecord,
    StepRecord,
    run_record_decoder,
    step_record_decoder,
)
from shared.kv_reads import read_steps
from shared.nats_types import KeyValue
from shared.tasks import cancel_and_wait

KEEPALIVE = 15.0  # seconds between SSE comments while nothing happens (proxies, dead peers)


class RunChanges:
    """What this client has been told (pure): a record is news once per state."""

    def __init__(self) -> None:
        self.steps: dict[str, tuple[str, int]] = {}
        self.run: tuple[str, bool] | None = None

    def step(self, rec: StepRecord) -> bytes:
        if self.steps.get(rec.id) == (rec.status, rec.attempt):
            return b""
        self.steps[rec.id] = (rec.status, rec.attempt)
        change = StepChange(
            step_id=rec.id,
            status=rec.status,
            attempt=rec.attempt,
            runner=rec.runner,
            exit_code=rec.exit_code,
            reason=rec.reason,
            started_at=rec.started_at,
            finished_at=rec.finished_at,
            retry_at=rec.retry_at,
        )
        return sse.event("step", change)

    def run_changed(self, rec: RunRecord) -> bytes:
        if self.run == (rec.status, rec.cancel_requested):
            return b""
        self.run = (rec.status, rec.cancel_requested)
        change = RunChange(
            run_id=rec.run_id,
            status=rec.status,
            finished_at=rec.finished_at,
            cancel_requested=rec.cancel_requested,
        )
        return sse.event("run", change)


def end_event(run: RunRecord, steps: list[StepRecord]) -> bytes:
    counts = dict(Counter(s.status for s in steps))
    return sse.event(
        "end",
        RunEnd(run_id=run.run_id, status=run.status, finished_at=run.finished_at, counts=counts),
    )


async def _pump(watcher: Any, decode: Any, queue: asyncio.Queue[RunRecord | StepRecord]) -> None:
    async for entry in watcher:
        if entry is not None and entry.value:
            with contextlib.suppress(msgspec.DecodeError):
                queue.put_nowait(decode(entry.value))


async def run_events(request: web.Request) -> web.StreamResponse:
    run_id = path_id(request, "run", "run id")
    runs: KeyValue = request.app[RESOURCES].runs
    run = await get_run_record(runs, run_id)
    if run is None:
        return error(404, f"run {run_id!r} not found")
    queue: asyncio.Queue[RunRecord | StepRecord] = asyncio.Queue()
    watchers = [
        await runs.watch(names.run_key(run_id)),
        await runs.watch(names.steps_of_run(run_id)),
    ]
    pumps = [
        asyncio.create_task(_pump(watchers[0], run_record_decoder.decode, queue)),
        asyncio.create_task(_pump(watchers[1], step_record_decoder.decode, queue)),
    ]
    resp = web.StreamResponse(headers=sse.HEADERS)
    try:
        await resp.prepare(request)
        await _stream(resp, runs, run, queue)
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client went away
    finally:
        for pump in pumps:
            await cancel_and_wait(pump)
        for watcher in watchers:
            with contextlib.suppress(Exception):
                await watcher.stop()
    return resp


async def _stream(
    resp: web.StreamResponse,
    runs: KeyValue,
    run: RunRecord,
    queue: asyncio.Queue[RunRecord | StepRecord],
) -> None:
    told = RunChanges()
    await resp.write(told.run_changed(run))
    while run.status not in TERMINAL_RUN:
        try:
            item = await asyncio.wait_for(queue.get(), KEEPALIVE)
        except TimeoutError:
            await resp.write(b": keepalive\n\n")
            fresh = await get_run_record(runs, run.run_id)  # in case a watch was lost
            if fresh is not None:
                queue.put_nowait(fresh)
            continue
        if isinstance(item, StepRecord):
            await resp.write(told.step(item))
        else:
            run = item
            await resp.write(told.run_changed(item))
    steps = await read_steps(runs, run)
    await resp.write(b"".join(told.step(s) for s in steps) + end_event(run, steps))


def setup_routes(app: web.Application) -> None:
    app.router.add_get("/api/runs/{run}/events", run_events)
