"""Reading state for the HTTP API: the run document and the runner pool, from KV.

A run is read with one filtered replay of its step keys (not a get per step), plus one of
its heartbeat keys for the live ``lastHeartbeatAt`` of running steps.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from nats.js.kv import KeyValue

from shared import names
from shared.contracts import (
    RunRecord,
    StepRecord,
    heartbeat_decoder,
    run_record_decoder,
    runner_info_decoder,
    step_record_decoder,
)
from shared.kv_reads import read_current, read_steps, stored_at, value_of
from shared.timefmt import from_epoch

_to_builtins = msgspec.to_builtins


async def get_run_record(runs_kv: KeyValue, run_id: str) -> RunRecord | None:
    value = await value_of(runs_kv, names.run_key(run_id))
    return run_record_decoder.decode(value) if value else None


async def get_step_record(runs_kv: KeyValue, run_id: str, step_id: str) -> StepRecord | None:
    value = await value_of(runs_kv, names.step_key(run_id, step_id))
    return step_record_decoder.decode(value) if value else None


# camelCase name in the document -> attribute of StepRecord, in the order shown.
STEP_FIELDS = {
    "id": "id",
    "command": "command",
    "dependsOn": "depends_on",
    "status": "status",
    "attempt": "attempt",
    "runner": "runner",
    "exitCode": "exit_code",
    "startedAt": "started_at",
    "finishedAt": "finished_at",
    "lastHeartbeatAt": "last_heartbeat_at",
    "stdoutTail": "stdout_tail",
    "stderrTail": "stderr_tail",
    "reason": "reason",
    "retries": "retries",
    "timeoutSeconds": "timeout_seconds",
    "queuedAt": "queued_at",
    "requeues": "requeues",
    "retryAt": "retry_at",
    "env": "env",  # the step's static variables (over the workflow's)
    "outputs": "outputs",  # what its succeeded attempt wrote to $HEDDLE_OUTPUTS
}


def step_document(step: StepRecord, heartbeat_at: float | None) -> dict[str, Any]:
    doc = {name: getattr(step, attr) for name, attr in STEP_FIELDS.items()}
    doc["attempts"] = _to_builtins(step.attempts)
    if heartbeat_at is not None and step.status in ("queued", "running"):
        doc["lastHeartbeatAt"] = from_epoch(heartbeat_at)
    return doc


async def run_document(runs_kv: KeyValue, hb_kv: KeyValue, run: RunRecord) -> dict[str, Any]:
    steps = await read_steps(runs_kv, run)
    live = any(s.status in ("queued", "running") for s in steps)
    beats: dict[tuple[str, str], float] = {}  # (step, runner) -> stored at
    if live:
        for e in await read_current(hb_kv, names.heartbeats_of_run(run.run_id)):
            hb = heartbeat_decoder.decode(e.value)
            at = stored_at(e)
            if at:
                beats[hb.step_id, hb.runner] = at
    out_steps = [step_document(s, beats.get((s.id, s.runner or ""))) for s in steps]
    edges = [{"from": p, "to": s.id} for s in steps for p in s.depends_on]
    counts: dict[str, int] = {}
    for s in steps:
        counts[s.status] = counts.get(s.status, 0) + 1
    return {
        "runId": run.run_id,
        "status": run.status,
        "createdAt": run.created_at,
        "finishedAt": run.finished_at,
        "cancelRequested": run.cancel_requested,
        "workflowName": run.workflow_name,
        "version": run.version,
        "trigger": run.trigger,
        "scheduledFor": run.scheduled_for,
        "scheduledTz": run.scheduled_tz,
        "params": run.params,
        "env": run.env,
        "retryOf": run.retry_of,
        "retriedBy": run.retried_by,
        "counts": counts,
        "steps": out_steps,
        "edges": edges,
    }


async def pool_document(runners_kv: KeyValue) -> dict[str, Any]:
    now = time.time()
    runners = []
    for e in await read_current(runners_kv, ">"):
        info = runner_info_decoder.decode(e.value)
        seen = stored_at(e)
        runners.append(
            {
                "name": info.name,
                "pod": info.pod,
                "node": info.node,
                "pid": info.pid,
                "status": info.status,
                "runId": info.run_id,
                "stepId": info.step_id,
                "attempt": info.attempt,
                "version": info.version,
                "startedAt": info.started_at,
                "lastSeenAt": from_epoch(seen) if seen else info.seen_at,
                "secondsSinceSeen": round(max(now - seen, 0.0), 3) if seen else None,
            }
        )
    runners.sort(key=lambda r: r["name"])
    leased = [
        {"runner": r["name"], "runId": r["runId"], "stepId": r["stepId"]}
        for r in runners
        if r["status"] == "busy"
    ]
    return {
        "total": len(runners),
        "available": sum(1 for r in runners if r["status"] == "idle"),
        "leased": leased,
        "runners": runners,
    }
