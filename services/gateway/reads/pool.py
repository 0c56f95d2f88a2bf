"""The runner pool for ``GET /api/runners``: every runner of the registry, with when the step
it holds began, and the runner pods: the records the orchestrator's pod watch keeps in
``heddle-pods`` (services/orchestrator/pod_watch.py), each joined with its runner's registry
entry. Outside a cluster the bucket is empty, and so is the list of pods. A pod with no
registry entry is one whose agent never registered (crash-looping, not started yet) or left."""

from __future__ import annotations

import asyncio
import time

import msgspec
from heddle.services.gateway.reads.runs import get_step_record
from heddle.shared.api.answers import Lease, PodDoc, Pool, RunnerDoc
from heddle.shared.broker.buckets import Bucket
from heddle.shared.broker.kv_reads import read_current, stored_at
from heddle.shared.core.labels import runner_labels
from heddle.shared.wire.contracts import RunnerInfo, runner_info_decoder, runner_pod_decoder
from heddle.shared.wire.timefmt import from_epoch


async def pod_documents(pods_kv: Bucket, runners: list[RunnerDoc]) -> list[PodDoc]:
    by_name = {r.name: r for r in runners}
    out = []
    for entry in await read_current(pods_kv, ">"):
        try:
            pod = runner_pod_decoder.decode(entry.value)
        except msgspec.DecodeError:
            continue
        runner = by_name.get(pod.runner)
        out.append(
            PodDoc(
                name=pod.name,
                runner=pod.runner,
                phase=pod.phase,
                node=pod.node,
                ready=pod.ready,
                restarts=pod.restarts,
                reason=pod.reason,
                last_termination=pod.last_termination,
                seen_at=pod.seen_at,
                registered=runner is not None,
                status=runner.status if runner is not None else None,
                run_id=runner.run_id if runner is not None else None,
                step_id=runner.step_id if runner is not None else None,
                attempt=runner.attempt if runner is not None else None,
            )
        )
    out.sort(key=lambda d: d.name)
    return out


async def held_since(runs_kv: Bucket, info: RunnerInfo) -> str | None:
    """When the step a busy runner holds began its current attempt: its start, or the time
    it was queued while its start is not reported yet (one get of the step's record)."""
    if info.status != "busy" or not info.run_id or not info.step_id:
        return None
    step = await get_step_record(runs_kv, info.run_id, info.step_id)
    if step is None or step.attempt != info.attempt:
        return None
    return step.started_at or step.queued_at


async def pool_document(runners_kv: Bucket, runs_kv: Bucket) -> Pool:
    now = time.time()
    runners = []
    entries = await read_current(runners_kv, ">")
    infos = [runner_info_decoder.decode(e.value) for e in entries]
    # One get per busy runner, at once: a pool's size, never a replay of runs.
    since = await asyncio.gather(*(held_since(runs_kv, info) for info in infos))
    for e, info, held in zip(entries, infos, since, strict=True):
        seen = stored_at(e)
        runners.append(
            RunnerDoc(
                name=info.name,
                pod=info.pod,
                node=info.node,
                pid=info.pid,
                status=info.status,
                run_id=info.run_id,
                step_id=info.step_id,
                attempt=info.attempt,
                version=info.version,
                started_at=info.started_at,
                last_seen_at=from_epoch(seen) if seen else info.seen_at,
                seconds_since_seen=round(max(now - seen, 0.0), 3) if seen else None,
                held_since=held,
                pool=info.pool,
                labels=runner_labels(info.pool, info.labels),
                namespaces=info.namespaces,
            )
        )
    runners.sort(key=lambda r: r.name)
    return Pool(
        total=len(runners),
        available=sum(1 for r in runners if r.status == "idle"),
        leased=[
            Lease(runner=r.name, run_id=r.run_id, step_id=r.step_id)
            for r in runners
            if r.status == "busy"
        ],
        runners=runners,
        pods=[],  # GET /api/runners adds them (pod_documents)
    )
