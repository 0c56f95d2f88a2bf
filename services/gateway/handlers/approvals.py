"""Approval gates (docs/approvals.md): ``POST /api/runs/{run}/steps/{step}/approve`` and
``/reject`` answer a gate waiting, and ``GET /api/approvals`` lists the gates waiting.

Exactly one answer wins: it is stored on the gate's record in heddle-approvals by
compare-and-set (its revision), and only the winner sends DecideApproval to the run's
orchestrator; a loser, and any answer after, gets a 409 saying how and by whom the gate was
answered. An answer stored whose command was lost is found there by the orchestrator's
gate look."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from aiohttp import web
from heddle.services.gateway.http import answers
from heddle.services.gateway.http.inputs import path_step_id, read_json
from heddle.services.gateway.http.keys import CALLER, RESOURCES
from heddle.services.gateway.http.scope import listed_namespaces, scoped_run
from heddle.services.gateway.openapi.route import NAMESPACE, RUN, STEP, UNKNOWN_NAMESPACE, Route
from heddle.services.gateway.reads.runs import get_step_record
from heddle.shared.api.answers import GateAnswer, GateComment, WaitingGate, WaitingGates
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.broker.nats_types import KeyNotFoundError, KeyWrongLastSequenceError
from heddle.shared.core.approvals import answer_problems, answered, not_waiting, timed_out
from heddle.shared.core.namespaces import namespace_of, own_name
from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    ApprovalDecision,
    ApprovalGate,
    DecideApproval,
    approval_gate_decoder,
    encode,
)
from heddle.shared.wire.timefmt import now_rfc3339

log = logging.getLogger("heddle.gateway")


async def approve(request: web.Request) -> web.Response:
    return await _answer(request, approved=True)


async def reject(request: web.Request) -> web.Response:
    return await _answer(request, approved=False)


async def _comment(request: web.Request) -> str:
    body: Any = {}
    if request.can_read_body:
        body = await read_json(request)
    problems = answer_problems(body)
    if problems:
        raise answers.bad_request("invalid answer", problems)
    comment: str = body.get("comment", "")
    return comment


async def _answer(request: web.Request, *, approved: bool) -> web.Response:
    run_id, run = await scoped_run(request)
    step_id = path_step_id(request)
    comment = await _comment(request)
    if run is None:
        return answers.error(404, f"run {run_id!r} not found")
    res = request.app[RESOURCES]
    step = await get_step_record(res.runs, run.run_id, step_id)
    if step is None:
        return answers.error(404, f"step {step_id!r} not found in run {run_id!r}")
    if step.approval is None:
        return answers.error(409, f"step {step_id!r} is not an approval gate", status=step.status)
    if step.status != "waiting":  # a gate's record a lost write left behind takes none either
        return await _refusal(request, run.run_id, step_id)
    key = names.approval_key(run.run_id, step_id)
    caller = request.get(CALLER)
    decision = ApprovalDecision(
        approved=approved,
        by=caller.name if caller is not None else "anonymous",
        decided_at=now_rfc3339(),
        comment=comment,
    )
    try:
        entry = await res.approvals.get(key)
        gate = approval_gate_decoder.decode(entry.value or b"")
        if gate.decision is None and not timed_out(gate, decision.decided_at):
            answer = msgspec.structs.replace(gate, decision=decision)
            await res.approvals.update(key, encode(answer), last=entry.revision)
            return await _decided(request, run.run_id, answer, decision)
    except (KeyNotFoundError, KeyWrongLastSequenceError):
        pass  # ended, not written yet, or answered just now: said below
    return await _refusal(request, run.run_id, step_id)


async def _decided(
    request: web.Request, run_id: str, gate: ApprovalGate, decision: ApprovalDecision
) -> web.Response:
    """The answer stored: sent to the run's orchestrator, and answered."""
    cmd = DecideApproval(
        run_id=run_id,
        step_id=gate.step_id,
        attempt=gate.attempt,
        approved=decision.approved,
        by=decision.by,
        decided_at=decision.decided_at,
        comment=decision.comment,
    )
    msg_id = f"approval.{names.approval_key(run_id, gate.step_id)}.{gate.attempt}"
    js = request.app[RESOURCES].js
    await js.publish(names.cmd_approval(run_id), encode(cmd), headers={"Nats-Msg-Id": msg_id})
    event(log, "gate answered", run=run_id, step=gate.step_id, approved=decision.approved)
    body = GateAnswer(
        run_id=own_name(run_id),
        namespace=namespace_of(run_id),
        step_id=gate.step_id,
        attempt=gate.attempt,
        decision=decision,
    )
    return answers.json_response(body)


async def _refusal(request: web.Request, run_id: str, step_id: str) -> web.Response:
    """The 409 of a gate not waiting for an answer: answered (how, by whom), not waiting
    yet, or ended, as its records say now."""
    res = request.app[RESOURCES]
    try:
        entry = await res.approvals.get(names.approval_key(run_id, step_id))
        gate = approval_gate_decoder.decode(entry.value or b"")
        if gate.decision is not None:
            return answers.error(409, answered(step_id, gate.decision), status="waiting")
        if timed_out(gate, now_rfc3339()):  # the orchestrator is failing it
            message = f"step {step_id!r} timed out at {gate.deadline_at}: it takes no answer"
            return answers.error(409, message, status="waiting")
    except KeyNotFoundError:
        pass
    step = await get_step_record(res.runs, run_id, step_id)
    if step is None:
        return answers.error(404, f"step {step_id!r} not found in run {own_name(run_id)!r}")
    if step.decision is not None:
        return answers.error(409, answered(step_id, step.decision), status=step.status)
    if step.status == "waiting":  # its record is being written: a moment more
        message = f"step {step_id!r} is starting to wait; answer it again in a moment"
        return answers.error(409, message, status=step.status)
    return answers.error(409, not_waiting(step_id, step.status), status=step.status)


async def list_approvals(request: web.Request) -> web.Response:
    """The gates waiting now, in the namespaces the token sees (or the one asked for)."""
    shown = await listed_namespaces(request)
    res = request.app[RESOURCES]
    waiting: list[WaitingGate] = []
    for entry in await read_current(res.approvals, ">"):
        try:
            gate = approval_gate_decoder.decode(entry.value)
        except msgspec.DecodeError:
            continue
        namespace = namespace_of(gate.run_id)
        if gate.decision is not None or (shown is not None and namespace not in shown):
            continue
        # The step's own record says whether it waits: a gate's record is deleted after it,
        # and a write lost with a server could leave one behind.
        step = await get_step_record(res.runs, gate.run_id, gate.step_id)
        if step is None or step.status != "waiting" or step.attempt != gate.attempt:
            continue
        waiting.append(
            WaitingGate(
                run_id=own_name(gate.run_id),
                namespace=namespace,
                step_id=gate.step_id,
                attempt=gate.attempt,
                message=gate.message,
                since=gate.since,
                deadline_at=gate.deadline_at,
                workflow_name=None if gate.workflow_name is None else own_name(gate.workflow_name),
            )
        )
    waiting.sort(key=lambda g: (g.since, g.namespace, g.run_id, g.step_id))
    return answers.json_response(WaitingGates(approvals=waiting))


ANSWER_ERRORS = {
    409: (
        "The step is not an approval gate, or is not waiting for an answer: answered already "
        "(the message says how, by whom and when), not started yet, or ended"
    ),
}
ANSWER_EXAMPLE = {"comment": "checked the staging run"}


def _answer_route(verb: str, handler: Any, summary: str) -> Route:
    return Route(
        "POST",
        f"/api/runs/{{run}}/steps/{{step}}/{verb}",
        handler,
        operation_id=f"{verb}Step",
        summary=summary,
        tag="runs",
        role="operator",
        answers={200: (GateAnswer, "Answered: the orchestrator ends the gate as it says")},
        params=(NAMESPACE, RUN, STEP),
        body=GateComment,
        body_required=False,
        example=ANSWER_EXAMPLE,
        errors=ANSWER_ERRORS,
    )


ROUTES = (
    _answer_route("approve", approve, "Approve an approval gate waiting: the step succeeds"),
    _answer_route("reject", reject, "Reject an approval gate waiting: the step fails"),
    Route(
        "GET",
        "/api/approvals",
        list_approvals,
        operation_id="listApprovals",
        summary="The approval gates waiting for an answer",
        tag="runs",
        role="viewer",
        answers={200: (WaitingGates, "The gates waiting, oldest first")},
        params=(NAMESPACE,),
        errors=UNKNOWN_NAMESPACE,
    ),
)
