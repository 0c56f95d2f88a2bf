"""``GET /api/runs/{run}/events``: a run's state changes as server-sent events, ending when
the run does, so that a script, the page or the bench is told instead of polling.

The stream opens with the current state of the run and of every step (so a client that
reconnects needs no cursor), then sends each change as it is stored:

- ``event: step``: a step's new state (``StepChange``), once per status and attempt;
- ``event: run``: the run's new state (``RunChange``);
- ``event: end``: the run is terminal (``RunEnd``, with its step counts); the stream ends.

With ``?steps=none`` the steps are left out, but for the counts of the end: only the run
record is followed, which is what a client waiting for the end needs, at a cost that does
not grow with the run's steps.

The changes come from a core subscription to the run's keys in heddle-runs
(shared/broker/kv_changes.py: no consumer on the server per client), taken before the opening
snapshot is read; a record is news only when it has come further than what the client was
told (services/gateway/reads/progress.py), so the two may arrive in any order. When the run record
turns terminal, it and the step records are read once more, in one batched get, and their
stored state is told, so the stream ends on what is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter
from collections.abc import Callable

import msgspec
from aiohttp import web
from heddle.services.gateway.handlers.run_steps import steps_choice, steps_param
from heddle.services.gateway.http import sse
from heddle.services.gateway.http.answers import error
from heddle.services.gateway.http.inputs import path_id
from heddle.services.gateway.http.keys import RESOURCES
from heddle.services.gateway.http.scope import object_scope
from heddle.services.gateway.openapi.route import NAMESPACE, RUN, Route
from heddle.services.gateway.reads.progress import (
    RunProgress,
    StepProgress,
    run_progress,
    step_progress,
)
from heddle.services.gateway.reads.runs import get_run_record, stored_when
from heddle.shared.api.answers import RunChange, RunEnd, StepChange
from heddle.shared.broker.buckets import Bucket
from heddle.shared.broker.kv_changes import KeyChanges
from heddle.shared.broker.kv_reads import read_run_and_steps, read_steps
from heddle.shared.core.namespaces import namespace_of, own_name, split_qualified
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    TERMINAL_RUN,
    RunRecord,
    StepRecord,
    run_record_decoder,
    step_record_decoder,
)

KEEPALIVE = 15.0  # seconds between SSE comments while nothing happens (proxies, dead peers)


class RunChanges:
    """What this client has been told (pure): a record is news once per state."""

    def __init__(self) -> None:
        self.steps: dict[str, tuple[StepProgress, str, int]] = {}
        self.run: RunProgress | None = None

    def step(self, rec: StepRecord, stored: bool = False) -> bytes:
        """The record as an event, or nothing if the client knows as much already.
        ``stored``: read from the store at the end, told if its state differs from the
        last told, even one that came no further (a refused write was seen live)."""
        progress = step_progress(rec)
        told = self.steps.get(rec.id)
        if told is not None and (
            told[1:] == (rec.status, rec.attempt) or (not stored and progress <= told[0])
        ):
            return b""
        self.steps[rec.id] = (progress, rec.status, rec.attempt)
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
            queued_at=rec.queued_at,
        )
        return sse.event("step", change)

    def run_changed(self, rec: RunRecord) -> bytes:
        progress = run_progress(rec)
        if self.run is not None and progress <= self.run:
            return b""
        self.run = progress
        namespace, own = split_qualified(rec.run_id)
        change = RunChange(
            run_id=own,
            namespace=namespace,
            status=rec.status,
            finished_at=rec.finished_at,
            cancel_requested=rec.cancel_requested,
            waiting=rec.waiting,
            reason=rec.reason,
        )
        return sse.event("run", change)


def end_event(run: RunRecord, steps: list[StepRecord]) -> bytes:
    tally: Counter[str] = Counter(s.status for s in steps)
    counts = dict(tally)
    return sse.event(
        "end",
        RunEnd(
            run_id=own_name(run.run_id),
            namespace=namespace_of(run.run_id),
            status=run.status,
            finished_at=run.finished_at,
            counts=counts,
        ),
    )


def _decoded(queue: asyncio.Queue[RunRecord | StepRecord]) -> Callable[[str, bytes], None]:
    def put(key: str, value: bytes) -> None:
        decode = run_record_decoder if key.startswith("run.") else step_record_decoder
        with contextlib.suppress(msgspec.DecodeError):
            queue.put_nowait(decode.decode(value))

    return put


async def run_events(request: web.Request) -> web.StreamResponse:
    run_id = path_id(request, "run", "run id")
    with_steps = steps_choice(request) != "none"
    scope = object_scope(request)
    if not scope.seen:  # nothing followed nor told: as a run that does not exist
        return error(404, f"run {run_id!r} not found")
    stored = scope.stored(run_id)
    runs: Bucket = request.app[RESOURCES].runs
    queue: asyncio.Queue[RunRecord | StepRecord] = asyncio.Queue()
    keys = (names.run_key(stored), names.steps_of_run(stored))
    changes = KeyChanges(runs, keys if with_steps else keys[:1], _decoded(queue))
    await changes.start()
    try:
        run = await get_run_record(runs, stored)
        if run is None:
            return error(404, f"run {run_id!r} not found")
        resp = web.StreamResponse(headers=sse.HEADERS)
        try:
            await resp.prepare(request)
            await _stream(resp, runs, run, queue, with_steps)
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client went away
        return resp
    finally:
        await changes.stop()


async def _stream(
    resp: web.StreamResponse,
    runs: Bucket,
    run: RunRecord,
    queue: asyncio.Queue[RunRecord | StepRecord],
    with_steps: bool = True,
) -> None:
    told = RunChanges()
    await resp.write(told.run_changed(run))
    if run.status not in TERMINAL_RUN and with_steps:
        await resp.write(b"".join(told.step(s) for s in await read_steps(runs, run)))
    steps: list[StepRecord] | None = None  # as stored with the run's end, when seen live
    while run.status not in TERMINAL_RUN:
        try:
            item = await asyncio.wait_for(queue.get(), KEEPALIVE)
        except TimeoutError:
            await resp.write(b": keepalive\n\n")
            # What a reconnection of the gateway's NATS connection may have missed.
            fresh = await get_run_record(runs, run.run_id)
            if fresh is not None:
                queue.put_nowait(fresh)
                for step in await read_steps(runs, fresh) if with_steps else ():
                    queue.put_nowait(step)
            continue
        if isinstance(item, StepRecord):
            await resp.write(told.step(item))
            continue
        if item.status in TERMINAL_RUN:
            # Ended once the store says so: then every step record is stored too, and
            # the same read brings them.
            stored = await stored_when(
                functools.partial(_ended, runs, run.run_id), lambda ended: True
            )
            if stored is None:
                continue
            run, steps = stored
            break
        run = item
        await resp.write(told.run_changed(item))
    if steps is None:
        steps = await read_steps(runs, run)
    told_steps = b"".join(told.step(s, stored=True) for s in steps) if with_steps else b""
    await resp.write(told.run_changed(run) + told_steps + end_event(run, steps))


async def _ended(runs: Bucket, run_id: str) -> tuple[RunRecord, list[StepRecord]] | None:
    run, steps = await read_run_and_steps(runs, run_id)
    return (run, steps) if run is not None and run.status in TERMINAL_RUN else None


ROUTES = (
    Route(
        "GET",
        "/api/runs/{run}/events",
        run_events,
        operation_id="runEvents",
        summary="A run's state changes, as they happen",
        tag="runs",
        role="viewer",
        answers={
            200: (
                "text/event-stream",
                "Server-sent events: the current state first, then `step` (StepChange) and "
                "`run` (RunChange) events as they are stored, and a last `end` (RunEnd) when "
                "the run is over",
            )
        },
        params=(
            NAMESPACE,
            RUN,
            steps_param(
                "all (the default): the steps' states and changes too; none: only the run's "
                "and the end, for a client that waits for the run to end"
            ),
        ),
    ),
)
