"""The facts a run document's ``waitingFor`` needs (reads/waiting.py decides), each read only
when one of the run's records asks for it: the runners' registry (one replay, a pool's size)
when a step is queued; each semaphore a pending step waits for (one get each); the waiting
runs of higher priority from the gateway's run index (in memory) when the run waits; its
namespace's runs-under-way quota's key (one get) when the run waits for that."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
from heddle.services.gateway.reads.waiting import (
    WaitFacts,
    needs_registry,
    semaphore_of,
    semaphores_waited,
)
from heddle.shared.broker.concurrency_store import KEYS
from heddle.shared.broker.kv_reads import last_value_matching, read_current
from heddle.shared.broker.nats_types import NatsError
from heddle.shared.core.namespaces import namespace_of
from heddle.shared.core.quotas import runs_key
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunnerInfo, RunRecord, StepRecord, runner_info_decoder

if TYPE_CHECKING:
    from heddle.services.gateway.reads.run_index import RunList
    from heddle.shared.broker.buckets import Bucket
    from heddle.shared.broker.nats_types import JetStreamContext


@dataclass(frozen=True)
class WaitSources:
    runners: Bucket  # heddle-runners
    js: JetStreamContext  # for heddle-semaphores, which may not exist
    runs: RunList  # the gateway's run index
    concurrency: Bucket  # heddle-concurrency: a namespace's runs-under-way quota


async def wait_facts(src: WaitSources, run: RunRecord, steps: list[StepRecord]) -> WaitFacts:
    wanted = semaphores_waited(steps)
    registry, docs = await asyncio.gather(
        read_registry(src.runners) if needs_registry(steps) else _nothing(),
        asyncio.gather(*(_semaphore(src.js, name) for name in wanted)),
    )
    quota = None
    if run.quota_wait and not run.concurrency_wait:
        quota, _ = await KEYS.read(src.concurrency, runs_key(namespace_of(run.run_id)))
    return WaitFacts(
        runners=registry,
        semaphores={name: semaphore_of(doc) for name, doc in zip(wanted, docs, strict=True)},
        priority_ahead=src.runs.higher_priority_ahead(run) if run.waiting else 0,
        runs_quota=quota,
    )


async def _nothing() -> list[RunnerInfo]:
    return []


async def read_registry(runners_kv: Bucket) -> list[RunnerInfo]:
    out = []
    for entry in await read_current(runners_kv, ">"):
        with contextlib.suppress(msgspec.DecodeError):
            out.append(runner_info_decoder.decode(entry.value))
    return out


async def _semaphore(js: JetStreamContext, name: str) -> bytes | None:
    # The bucket is made by the semaphores' owner: until then no semaphore has holders.
    try:
        return await last_value_matching(js, names.SEMAPHORES_BUCKET, name)
    except NatsError:
        return None
