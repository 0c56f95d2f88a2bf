"""Registered workflows as the API shows them (pure): a workflow's list entry, its
definition, its next fire times, and a run of its history."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from heddle.shared.api.answers import Edge
from heddle.shared.api.registry_answers import (
    HistoryEntry,
    LastRun,
    WorkflowDefinition,
    WorkflowSummary,
)
from heddle.shared.core.cron import slots_between
from heddle.shared.core.namespaces import namespace_of, own_name
from heddle.shared.wire.contracts import RunRecord, RunSummary, WorkflowLatest, WorkflowVersion
from heddle.shared.wire.timefmt import rfc3339

NEXT_FIRES = 3
HORIZON = timedelta(days=5 * 366)  # how far ahead next fire times are looked for


def facts(w: WorkflowLatest) -> dict[str, Any]:
    """What a workflow's list entry and its pause answer share."""
    return {
        "name": own_name(w.name),
        "namespace": namespace_of(w.name),
        "version": w.version,
        "registered_at": w.registered_at,
        "schedule": w.schedule,
        "timezone": w.timezone,
        "catchup": w.catchup,
        "paused": w.paused,
        "step_count": w.step_count,
        "description": w.description,
    }


def next_fires(w: WorkflowLatest, now: datetime) -> list[str]:
    """The schedule's next slots after ``now`` (none while paused), in UTC."""
    if not w.schedule or w.paused:
        return []
    try:
        slots = slots_between(w.schedule, w.timezone, now, now + HORIZON, NEXT_FIRES)
    except ValueError:  # croniter's errors are ValueErrors: it gives up on unreachable dates
        return []
    return [rfc3339(s) for s in slots]


def recent_runs(runs: list[RunRecord]) -> list[LastRun]:
    return [
        LastRun(run_id=own_name(r.run_id), status=r.status, created_at=r.created_at) for r in runs
    ]


def summary_document(
    w: WorkflowLatest, last: RunSummary | None, recent: list[RunRecord], now: datetime
) -> WorkflowSummary:
    shown = None
    if last is not None:
        shown = LastRun(
            run_id=own_name(last.run_id), status=last.status, created_at=last.created_at
        )
    return WorkflowSummary(
        **facts(w),
        last_run=shown,
        recent=recent_runs(recent),
        next_fires=next_fires(w, now),
    )


def definition_document(
    w: WorkflowVersion, latest: WorkflowLatest, recent: list[RunRecord], now: datetime
) -> WorkflowDefinition:
    spec = w.spec
    return WorkflowDefinition(
        name=own_name(w.name),
        namespace=namespace_of(w.name),
        version=w.version,
        latest_version=latest.version,
        registered_at=w.registered_at,
        schedule=spec.schedule,
        timezone=spec.timezone,
        catchup=spec.catchup,
        paused=latest.paused,
        description=spec.description,
        step_count=len(spec.steps),
        params=spec.params,
        env=spec.env,
        timeout_seconds=spec.timeout_seconds,
        priority=spec.priority,
        steps=spec.steps,
        edges=[Edge(from_=p, to=s.id) for s in spec.steps for p in s.depends_on],
        recent=recent_runs(recent),
        next_fires=next_fires(latest, now),
    )


def history_entry(r: RunSummary) -> HistoryEntry:
    return HistoryEntry(
        run_id=own_name(r.run_id),
        namespace=namespace_of(r.run_id),
        status=r.status,
        version=r.version,
        trigger=r.trigger,
        scheduled_for=r.scheduled_for,
        created_at=r.created_at,
        finished_at=r.finished_at,
        counts=r.counts,
    )
