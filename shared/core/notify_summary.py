"""The body POSTed to a notify target: a summary of the run's end (docs/notifications.md),
as its namespace names it. Pure: no I/O."""

from __future__ import annotations

import msgspec
from heddle.shared.core.namespaces import own_name, split_qualified
from heddle.shared.wire.contracts import RunRecord, StepRecord


class FailedStep(msgspec.Struct, rename="camel", kw_only=True):
    id: str
    reason: str | None
    exit_code: int | None


class RunEnded(msgspec.Struct, rename="camel", kw_only=True):
    """The body: ``url`` is the run's page, None when no public address is set."""

    run_id: str
    namespace: str
    workflow: str | None
    version: int | None
    status: str
    trigger: str
    created_at: str
    finished_at: str | None
    reason: str | None
    failed_steps: list[FailedStep]
    url: str | None


def run_page(public_url: str, run_id: str) -> str | None:
    """The run's page on the gateway's public address (HEDDLE_PUBLIC_URL), if one is set."""
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/#/runs/{own_name(run_id)}"


def run_ended(run: RunRecord, steps: list[StepRecord], public_url: str) -> RunEnded:
    namespace, own = split_qualified(run.run_id)
    return RunEnded(
        run_id=own,
        namespace=namespace,
        workflow=None if run.workflow_name is None else own_name(run.workflow_name),
        version=run.version,
        status=run.status,
        trigger=run.trigger,
        created_at=run.created_at,
        finished_at=run.finished_at,
        reason=run.reason,
        failed_steps=[
            FailedStep(id=s.id, reason=s.reason, exit_code=s.exit_code)
            for s in steps
            if s.status == "failed"
        ],
        url=run_page(public_url, run.run_id),
    )


def summary_body(run: RunRecord, steps: list[StepRecord], public_url: str) -> bytes:
    return msgspec.json.encode(run_ended(run, steps, public_url))
