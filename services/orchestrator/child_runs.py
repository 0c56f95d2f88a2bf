"""The I/O of calls (docs/sub-workflows.md), within a batch's pass of writes (effect_writes.py):
a call step's child run submitted, with the registered workflow it calls read first; a
child run cancelled with its parent; a child's end sent to its parent. Each is a publish
to the command stream under a message id of the child's, so a pass made again sends one."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from heddle.services.orchestrator.decisions import CancelChild, StartChild, TellParent
from heddle.shared.broker import registry
from heddle.shared.broker.kv_reads import value_of
from heddle.shared.core import concurrency
from heddle.shared.core.calls import child_params, gone_reason, missing_reason
from heddle.shared.core.expressions import ExpressionError
from heddle.shared.core.namespaces import namespace_of, own_name, qualified
from heddle.shared.core.validation import Limits, submit_problems
from heddle.shared.runtime import failpoints
from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    CancelRun,
    ChildEnded,
    SubmitRun,
    WorkflowSpec,
    encode,
)
from heddle.shared.wire.timefmt import now_rfc3339

if TYPE_CHECKING:
    from heddle.shared.broker.acked import AckedPublisher
    from heddle.shared.broker.nats_types import KeyValue

log = logging.getLogger("heddle.orchestrator")
CHILD_TOLD = "orchestrator.child_told"


class ChildRuns:
    def __init__(
        self, acked: AckedPublisher, workflows: KeyValue, runs: KeyValue, limits: Limits
    ) -> None:
        self.acked = acked
        # The checks a child's submit meets where it is taken (submissions.py): one refused
        # there would leave its call step running for ever, so it is refused here.
        self.limits = limits
        self.workflows = workflows  # heddle-workflows, read as the cron scheduler does
        self.runs = runs  # heddle-runs: whether a child sent again is stored already

    async def publish(
        self, run_id: str, eff: StartChild | CancelChild | TellParent
    ) -> asyncio.Future[Any]:
        """The effect's command sent; its acknowledgement to await with the batch's."""
        match eff:
            case StartChild():
                return await self._start(run_id, eff)
            case CancelChild(child_run=child):
                event(log, "child cancelled", run=run_id, child=child)
                cancel = CancelRun(
                    run_id=child,
                    requested_at=now_rfc3339(),
                    reason=f"its parent run {own_name(run_id)} was stopped",
                )
                return await self._send(
                    names.cmd_cancel(child), encode(cancel), names.child_cancel_msg_id(child)
                )
            case TellParent(ended=ended):
                event(log, "child ended", run=ended.run_id, child=run_id, status=ended.status)
                told = await self._tell(ended)
                if failpoints.active(CHILD_TOLD):  # told, its end not stored (a fault test)
                    await told
                    failpoints.hit(CHILD_TOLD)
                return told

    async def _start(self, run_id: str, eff: StartChild) -> asyncio.Future[Any]:
        """The child's submit, as a trigger of the workflow would make it; the step's end,
        failed, if the workflow or the version it calls is gone. Nothing for a start sent
        again whose child is stored already."""
        if eff.again and await value_of(self.runs, names.run_key(eff.child_run)) is not None:
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_result(b"")
            return done
        name = qualified(namespace_of(run_id), eff.call.name)
        latest = await registry.get_latest(self.workflows, name)
        version = eff.call.version or (latest[0].version if latest else None)
        stored = None
        if latest is not None and version is not None:
            stored = await registry.get_version(self.workflows, name, version)
        if stored is None:
            reason = gone_reason(name, eff.call.version if latest is not None else None)
            return await self._tell(_failed(run_id, eff, reason))
        spec = stored.spec
        missing = missing_reason(eff.call, spec.params, stored.version)
        if missing is not None:
            return await self._tell(_failed(run_id, eff, missing))
        params = child_params(eff.call, spec.params)
        try:
            limited = concurrency.submit_fields(spec.concurrency, params, name)
        except ExpressionError as exc:
            return await self._tell(_failed(run_id, eff, f"its concurrency key: {exc.problem}"))
        cmd = _submit(eff, spec, name, version or stored.version, params, limited, run_id)
        refused = submit_problems(cmd, self.limits)
        if refused:
            why = "; ".join(f"{p.path}: {p.message}" for p in refused)
            return await self._tell(_failed(run_id, eff, f"its run would be refused: {why}"))
        event(log, "child started", run=run_id, step=eff.step_id, child=eff.child_run)
        return await self._send(
            names.cmd_submit(eff.child_run), encode(cmd), names.submit_msg_id(eff.child_run)
        )

    async def _tell(self, ended: ChildEnded) -> asyncio.Future[Any]:
        msg_id = names.child_ended_msg_id(ended.child_run)
        return await self._send(names.cmd_child(ended.run_id), encode(ended), msg_id)

    async def _send(self, subject: str, payload: bytes, msg_id: str) -> asyncio.Future[Any]:
        return await self.acked.publish(subject, payload, headers={"Nats-Msg-Id": msg_id})


def _submit(
    eff: StartChild,
    spec: WorkflowSpec,
    name: str,
    version: int,
    params: dict[str, str],
    limited: dict[str, Any],
    parent: str,
) -> SubmitRun:
    return SubmitRun(
        run_id=eff.child_run,
        steps=spec.steps,
        submitted_at=now_rfc3339(),
        workflow_name=name,
        version=version,
        trigger="call",
        params=params,
        env=spec.env,
        on_exit=spec.on_exit,
        timeout_seconds=spec.timeout_seconds,
        priority=spec.priority,
        notify=spec.notify,
        parent_run=parent,
        parent_step=eff.step_id,
        call_depth=eff.depth,
        **limited,
    )


def _failed(run_id: str, eff: StartChild, reason: str) -> ChildEnded:
    """The end a child that could not be started is taken to have had."""
    event(log, "child not started", run=run_id, step=eff.step_id, reason=reason)
    return ChildEnded(
        run_id=run_id,
        step_id=eff.step_id,
        attempt=eff.attempt,
        child_run=eff.child_run,
        status="failed",
        ended_at=now_rfc3339(),
        reason=reason,
    )
