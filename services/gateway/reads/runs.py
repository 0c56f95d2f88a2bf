"""Reading a run for the HTTP API: its records, and the run document, from KV.

A run is read with one filtered replay of its step keys (not a get per step), plus one of
its heartbeat keys for the live ``lastHeartbeatAt`` of running steps.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from heddle.services.gateway.reads.notifications import notification_docs
from heddle.services.gateway.reads.wait_facts import WaitSources, wait_facts
from heddle.services.gateway.reads.waiting import Waits, waits
from heddle.shared.api.answers import (
    Edge,
    RunDocument,
    RunFacts,
    StepDocument,
    WaitingFor,
)
from heddle.shared.broker.kv_reads import read_current, read_steps, stored_at, value_of
from heddle.shared.core.namespaces import namespace_of, own_name
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    AttemptRecord,
    RunRecord,
    StepRecord,
    heartbeat_decoder,
    run_record_decoder,
    step_record_decoder,
)
from heddle.shared.wire.timefmt import from_epoch

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket

T = TypeVar("T")


async def get_run_record(runs_kv: Bucket, run_id: str) -> RunRecord | None:
    value = await value_of(runs_kv, names.run_key(run_id))
    return run_record_decoder.decode(value) if value else None


async def get_step_record(runs_kv: Bucket, run_id: str, step_id: str) -> StepRecord | None:
    value = await value_of(runs_kv, names.step_key(run_id, step_id))
    return step_record_decoder.decode(value) if value else None


# A record seen put live (shared/broker/kv_changes.py) is in the store a moment later: the server
# hands a publish to subscribers and to the stream's queue at once. Past this, the put
# was refused (a stale owner's conditional write) and the store keeps what it had.
STORED_WITHIN = 2.0  # seconds


async def stored_when(
    read: Callable[[], Awaitable[T | None]], done: Callable[[T], bool]
) -> T | None:
    """The record ``read`` returns once ``done`` holds for it; None if it does not within
    STORED_WITHIN."""
    deadline = time.monotonic() + STORED_WITHIN
    delay = 0.0005  # the store usually trails the live message by well under a millisecond
    while True:
        rec = await read()
        if rec is not None and done(rec):
            return rec
        if time.monotonic() > deadline:
            return None
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)


def step_document(
    step: StepRecord, heartbeat_at: float | None, waiting_for: WaitingFor | None = None
) -> StepDocument:
    beat = step.last_heartbeat_at
    if heartbeat_at is not None and step.status in ("queued", "running"):
        beat = from_epoch(heartbeat_at)
    return StepDocument(
        id=step.id,
        command=step.command,
        depends_on=step.depends_on,
        status=step.status,
        attempt=step.attempt,
        runner=step.runner,
        exit_code=step.exit_code,
        started_at=step.started_at,
        finished_at=step.finished_at,
        last_heartbeat_at=beat,
        stdout_tail=step.stdout_tail,
        stderr_tail=step.stderr_tail,
        reason=step.reason,
        retries=step.retries,
        timeout_seconds=step.timeout_seconds,
        queued_at=step.queued_at,
        requeues=step.requeues,
        retry_at=step.retry_at,
        attempts=[shown_attempt(a) for a in step.attempts],
        env=step.env,
        outputs=step.outputs,
        when=step.when,
        allow_failure=step.allow_failure,
        on_exit=step.on_exit,
        for_each=step.for_each,
        max_parallel=step.max_parallel,
        runs_on=step.runs_on,
        parent=step.parent,
        item=step.item,
        item_index=step.item_index,
        workflow=step.workflow,
        child_run=shown_name(step.child_run),
        approval=step.approval,
        decision=step.decision,
        waiting_for=msgspec.UNSET if waiting_for is None else waiting_for,
    )


def shown_attempt(attempt: AttemptRecord) -> AttemptRecord:
    """An attempt as the API shows it: a call step's child run by its own name."""
    if attempt.child_run is None:
        return attempt
    return msgspec.structs.replace(attempt, child_run=own_name(attempt.child_run))


def shown_name(stored: str | None) -> str | None:
    """A stored run or workflow name as the API shows it: its own name, its namespace being
    shown beside it (shared/core/namespaces.py)."""
    return None if stored is None else own_name(stored)


def run_facts(run: RunRecord) -> dict[str, Any]:
    """The run record's fields as ``RunFacts`` names them (the document and the list), its
    names as its namespace knows them."""
    facts = {f: getattr(run, f) for f in RunFacts.__struct_fields__ if f != "namespace"}
    facts.update(
        run_id=own_name(run.run_id),
        namespace=namespace_of(run.run_id),
        workflow_name=shown_name(run.workflow_name),
    )
    return facts


async def step_documents(
    hb_kv: Bucket, run_id: str, steps: list[StepRecord], why: dict[str, WaitingFor] | None = None
) -> list[StepDocument]:
    """``steps`` as the API shows them, with their runners' last heartbeats while live (one
    replay of the run's heartbeat keys, only if one of them is), and why each waits."""
    live = any(s.status in ("queued", "running") for s in steps)
    beats: dict[tuple[str, str], float] = {}  # (step, runner) -> stored at
    if live:
        for e in await read_current(hb_kv, names.heartbeats_of_run(run_id)):
            hb = heartbeat_decoder.decode(e.value)
            at = stored_at(e)
            if at:
                beats[hb.step_id, hb.runner] = at
    why = why or {}
    return [step_document(s, beats.get((s.id, s.runner or "")), why.get(s.id)) for s in steps]


async def run_document(
    runs_kv: Bucket,
    hb_kv: Bucket,
    run: RunRecord,
    *,
    with_steps: bool = True,
    sources: WaitSources | None = None,
    notifications: Bucket | None = None,
) -> RunDocument:
    """The run with its counts; with every step and edge, or (``with_steps`` False) none:
    the summary, for a run too big for one document (its steps are read in pages). With
    ``sources``, why the run and each of its steps waits; with ``notifications``, its
    notify targets' deliveries."""
    steps = await read_steps(runs_kv, run)
    found = Waits({}, None)
    if sources is not None:
        found = waits(run, steps, await wait_facts(sources, run, steps))
    shown = await step_documents(hb_kv, run.run_id, steps, found.steps) if with_steps else []
    return RunDocument(
        **run_facts(run),
        params=run.params,
        env=run.env,
        retry_of=shown_name(run.retry_of),
        retried_by=shown_name(run.retried_by),
        timeout_seconds=run.timeout_seconds,
        deadline_at=run.deadline_at,
        reason=run.reason,
        concurrency_key=run.concurrency_key,
        concurrency_limit=run.concurrency_limit if run.concurrency_key is not None else None,
        counts=dict(Counter(s.status for s in steps)),
        step_count=run.step_count,
        steps_included=with_steps,
        steps=shown,
        edges=[Edge(from_=p, to=s.id) for s in steps for p in s.depends_on] if with_steps else [],
        parent_run=shown_name(run.parent_run),
        parent_step=run.parent_step,
        call_depth=run.call_depth,
        notifications=[] if notifications is None else await notification_docs(notifications, run),
        waiting_for=msgspec.UNSET if found.run is None else found.run,
    )
