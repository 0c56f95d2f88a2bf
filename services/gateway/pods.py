"""The runner pods for ``GET /api/runners``: the records the orchestrator's pod watch keeps in
``heddle-pods`` (services/orchestrator/pod_watch.py), each joined with its runner's registry
entry. Outside a cluster the bucket is empty, and so is the list. A pod with no registry entry
is one whose agent never registered (crash-looping, not started yet) or left."""

from __future__ import annotations

import msgspec
from heddle.services.gateway.api_types import PodDoc, RunnerDoc
from heddle.shared.broker.buckets import Bucket
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.wire.contracts import runner_pod_decoder


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
