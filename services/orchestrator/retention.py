"""Retention: finished runs beyond ``HEDDLE_RETENTION_RUNS`` per workflow (newest kept), or
finished longer ago than ``HEDDLE_RETENTION_AGE``, are deleted with everything they left:

- ``step.<run>.*``, ``run.<run>`` and ``hist.<workflow>.<run>`` in heddle-runs,
- ``<run>.*`` in heddle-heartbeats and, for a run with notify targets, heddle-notifications,
- ``heddle.log.<run>.>`` in HEDDLE_LOGS and ``heddle.evt.<run>.>`` in HEDDLE_EVENTS,
- its commands and any timer still waiting (``heddle.cmd.*.<run>.>``, ``heddle.sched.*.<run>``
  and ``heddle.sched.*.<run>.>``) in HEDDLE_CMD, which would otherwise keep every command
  for the stream's seven days,
- the cron slot key ``<workflow>.<slot>`` of a scheduled run (the cursor is past it, so the
  slot is never planned again).

Each is a subject-filtered purge of the stream behind it; the run record goes last, so a
sweep cut short is finished by the next one. The run record alone is removed by a purge
marker (``KV-Operation: PURGE`` with a rollup), so that whoever follows ``run.*`` (the
gateway's run index) sees the run go; the marker expires after ``marker_ttl``. A run that
is not finished is never deleted, and is counted among the ones kept. Runs without a
workflow name fall under the age rule only.

The same pass repairs the history index (``history.py``): a finished run whose summary is
missing or stale (its final write was lost to a crash) gets it rewritten from its steps, and
a summary whose run is gone is removed; and a run that ended lately gets the deliveries of
its end that a crash kept from being stored (``notify_repair.py``). One pass reads every
run record once (a filtered replay), never the steps of a run it keeps.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from heddle.services.orchestrator.history import summary_of
from heddle.services.orchestrator.notify_repair import create_missing
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.broker.nats_types import KeyNotFoundError
from heddle.shared.core.cron_plan import slot_stamp
from heddle.shared.core.notify_plan import owed
from heddle.shared.runtime.periodic import Periodic
from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    TERMINAL_RUN,
    RunRecord,
    RunSummary,
    encode,
    run_record_decoder,
    run_summary_decoder,
    step_record_decoder,
)
from heddle.shared.wire.timefmt import parse

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket
    from heddle.shared.broker.nats_types import JetStreamContext

log = logging.getLogger("heddle.orchestrator.retention")
CHUNK = 50  # runs deleted at once
NOTIFICATIONS = names.NOTIFICATIONS_BUCKET
# Runs that ended within this many sweep intervals get their missing deliveries made: a
# sweep at the leader's start reaches back past the last one.
REPAIR_WINDOWS = 2


@dataclass(slots=True)
class Sweep:
    deleted: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    notified: list[str] = field(default_factory=list)  # deliveries made that were missing


def doomed(
    runs: list[RunRecord],
    now: float,
    keep_runs: int,
    keep_age: float,
    is_live: Callable[[str], bool],
) -> list[RunRecord]:
    """The runs retention deletes (pure): never one that is not finished."""
    by_workflow: dict[str | None, list[RunRecord]] = defaultdict(list)
    for run in runs:
        by_workflow[run.registered_workflow].append(run)
    out = []
    for name, group in by_workflow.items():
        group.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        for i, run in enumerate(group):
            if run.status not in TERMINAL_RUN or is_live(run.run_id):
                continue
            too_many = name is not None and keep_runs > 0 and i >= keep_runs
            finished = parse(run.finished_at or run.created_at).timestamp()
            too_old = keep_age > 0 and finished < now - keep_age
            if too_many or too_old:
                out.append(run)
    return out


class Retention:
    def __init__(
        self,
        js: JetStreamContext,
        runs_kv: Bucket,
        *,
        keep_runs: int,
        keep_age: float,
        interval: float,
        is_live: Callable[[str], bool] = lambda run_id: False,
        clock: Callable[[], float] = time.time,
        notifications: Bucket | None = None,
        marker_ttl: float | None = None,
    ) -> None:
        self.js = js
        self.runs_kv = runs_kv
        self.keep_runs = keep_runs
        self.keep_age = keep_age
        self.interval = interval
        self.is_live = is_live
        self.clock = clock
        self.notifications = notifications  # heddle-notifications, to repair (notify_repair.py)
        # Long enough for a follower to see it across a reconnect, short enough that the
        # markers of steady deletion hold a few minutes' worth.
        self.marker_ttl = marker_ttl if marker_ttl is not None else max(60.0, 2 * interval)
        self._periodic = Periodic("retention sweep", self.interval, self.sweep, log)

    async def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def sweep(self, now: float | None = None) -> Sweep:
        now = self.clock() if now is None else now
        # Summaries first, then runs: a run created in between has a record and no summary
        # yet (left alone: it is live), never a summary without a record.
        summaries = {
            s.run_id: s
            for s in (
                run_summary_decoder.decode(e.value)
                for e in await read_current(self.runs_kv, names.HIST_ALL)
            )
        }
        runs = [
            run_record_decoder.decode(e.value) for e in await read_current(self.runs_kv, "run.*")
        ]
        result = Sweep()
        gone = doomed(runs, now, self.keep_runs, self.keep_age, self.is_live)
        for i in range(0, len(gone), CHUNK):
            await asyncio.gather(*(self._delete(run) for run in gone[i : i + CHUNK]))
        result.deleted = [r.run_id for r in gone]
        deleted = set(result.deleted)
        kept = {r.run_id: r for r in runs if r.run_id not in deleted}
        for run_id, summary in summaries.items():
            if run_id not in kept and run_id not in deleted:
                await self._purge_kv(names.hist_key(summary.workflow_name, run_id))
        for run in kept.values():
            if run.registered_workflow is None or run.status not in TERMINAL_RUN:
                continue
            stored = summaries.get(run.run_id)
            if stored is None or stored.status != run.status:
                if not self.is_live(run.run_id):
                    await self._repair(run)
                    result.repaired.append(run.run_id)
        await self._fix_last(gone, kept)
        if self.notifications is not None:
            owing = owed(kept.values(), now, REPAIR_WINDOWS * self.interval, self.is_live)
            result.notified = await create_missing(self.notifications, owing)
        if result.deleted or result.repaired or result.notified:
            event(
                log,
                "retention",
                deleted=len(result.deleted),
                repaired=len(result.repaired),
                notifications=len(result.notified),
            )
        return result

    async def _purge_kv(self, key: str, bucket: str = names.RUNS_BUCKET) -> None:
        await self.js.purge_stream(names.kv_stream(bucket), subject=names.kv_subject(bucket, key))

    async def _delete(self, run: RunRecord) -> None:
        rid = run.run_id
        purges = [
            self._purge_kv(names.steps_of_run(rid)),
            self._purge_kv(names.heartbeats_of_run(rid), names.HEARTBEATS_BUCKET),
            self.js.purge_stream(names.LOGS_STREAM, subject=names.log_run_filter(rid)),
            self.js.purge_stream(names.EVENTS_STREAM, subject=names.evt_run_filter(rid)),
            self.js.purge_stream(names.CMD_STREAM, subject=names.cmd_run_filter(rid)),
            *(
                self.js.purge_stream(names.CMD_STREAM, subject=timers)
                for timers in names.sched_run_filters(rid)
            ),
        ]
        if run.notify:
            purges.append(self._purge_kv(names.notifications_of_run(rid), NOTIFICATIONS))
        workflow = run.registered_workflow
        if workflow is not None:
            purges.append(self._purge_kv(names.hist_key(workflow, rid)))
            if run.scheduled_for is not None:
                slot = names.cron_slot_key(workflow, slot_stamp(parse(run.scheduled_for)))
                purges.append(self._purge_kv(slot, names.CRON_BUCKET))
        await asyncio.gather(*purges)
        await self._mark_gone(rid)  # last: the record is how a sweep finds it

    async def _mark_gone(self, rid: str) -> None:
        """The run record replaced by a purge marker (its rollup removes the record), which
        the server removes in turn after ``marker_ttl``."""
        await self.js.publish(
            names.kv_subject(names.RUNS_BUCKET, names.run_key(rid)),
            b"",
            headers={
                "KV-Operation": "PURGE",
                "Nats-Rollup": "sub",
                "Nats-TTL": str(max(1, round(self.marker_ttl))),
            },
        )

    async def _repair(self, run: RunRecord) -> None:
        steps = await read_current(self.runs_kv, names.steps_of_run(run.run_id))
        counts: Counter[str] = Counter(step_record_decoder.decode(e.value).status for e in steps)
        assert run.registered_workflow is not None
        await self.runs_kv.put(
            names.hist_key(run.registered_workflow, run.run_id), encode(summary_of(run, counts))
        )

    async def _fix_last(self, gone: list[RunRecord], kept: dict[str, RunRecord]) -> None:
        """A workflow whose ``last`` run was deleted points at its newest remaining run."""
        touched = {r.registered_workflow for r in gone if r.registered_workflow is not None}
        if not touched:
            return
        lasts = {
            s.workflow_name: s
            for s in (
                run_summary_decoder.decode(e.value)
                for e in await read_current(self.runs_kv, names.LAST_RUN_ALL)
            )
        }
        for name in touched:
            last = lasts.get(name)
            if last is None or last.run_id in kept:
                continue
            remaining = [r for r in kept.values() if r.registered_workflow == name]
            if not remaining:
                await self._purge_kv(names.last_run_key(name))
                continue
            newest = max(remaining, key=lambda r: (r.created_at, r.run_id))
            try:
                entry = await self.runs_kv.get(names.hist_key(name, newest.run_id))
            except KeyNotFoundError:
                continue  # its summary is being repaired; the next sweep fixes last
            if entry.value:
                summary: RunSummary = run_summary_decoder.decode(entry.value)
                await self.runs_kv.put(names.last_run_key(name), encode(summary))
