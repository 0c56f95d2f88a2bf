"""Approval gates outlive their orchestrator (docs/approvals.md): a gate waiting when the
orchestrator is SIGKILLed still waits once it is back, and takes its answer; its timeout,
passed while none ran, fails it; and an answer the gateway stored on the gate's record whose
DecideApproval never went (the gateway gone between) is found by the orchestrator's look.
The gates against a stack left alone: tests/integration/test_approvals.py."""

from __future__ import annotations

import asyncio
import signal

import msgspec
from heddle.shared.wire import names
from heddle.shared.wire.contracts import ApprovalDecision, approval_gate_decoder, encode
from heddle.shared.wire.timefmt import now_rfc3339

from tests.support.approvals import DEPLOY, answer, gate_record, listed
from tests.support.stack import StackFactory, step_of, step_statuses


async def test_a_gate_waits_across_an_orchestrator_sigkilled_then_takes_its_answer(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    run_id = await s.submit(DEPLOY)
    await s.wait_step(run_id, "ok", {"waiting"})
    s.kill("orchestrator", signal.SIGKILL)
    s.start("orchestrator")
    await s.wait_ready(1)  # the orchestrator has started, and rebuilt the run
    run = await s.run(run_id)
    assert step_statuses(run) == {"build": "succeeded", "ok": "waiting", "ship": "pending"}
    assert await listed(s) == [(run_id, "ok")]
    status, body = await answer(s, run_id, "approve", comment="after the restart")
    assert status == 200, body
    run = await s.wait_run(run_id)
    assert run["status"] == "succeeded", run
    assert step_of(run, "ok")["decision"]["comment"] == "after the restart"


async def test_a_gate_s_timeout_passed_while_no_orchestrator_ran_fails_it(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    doc = {"steps": [{"id": "ok", "approval": {"message": "soon?", "timeoutSeconds": 1.5}}]}
    run_id = await s.submit(doc)
    await s.wait_step(run_id, "ok", {"waiting"})
    s.kill("orchestrator", signal.SIGKILL)
    await asyncio.sleep(2)
    assert (await s.run(run_id))["status"] == "running"  # nobody ended it meanwhile
    s.start("orchestrator")
    run = await s.wait_run(run_id, timeout=20)
    ok = step_of(run, "ok")
    assert (run["status"], ok["status"], ok["decision"]["by"]) == ("failed", "failed", "timeout")


async def test_an_answer_stored_whose_command_was_lost_is_found(stack: StackFactory) -> None:
    """The gateway's half alone, done by hand: the decision set on the gate's record by
    compare-and-set, and no DecideApproval sent."""
    s = await stack(runners=1)
    run_id = await s.submit(DEPLOY)
    await s.wait_step(run_id, "ok", {"waiting"})
    nc = await s.connect()
    try:
        kv = await nc.jetstream().key_value(names.APPROVALS_BUCKET)
        key = names.approval_key(run_id, "ok")
        entry = await kv.get(key)
        gate = approval_gate_decoder.decode(entry.value or b"")
        decision = ApprovalDecision(approved=True, by="gone", decided_at=now_rfc3339())
        await kv.update(
            key, encode(msgspec.structs.replace(gate, decision=decision)), entry.revision
        )
    finally:
        await nc.close()
    run = await s.wait_run(run_id, timeout=20)
    assert run["status"] == "succeeded", run
    assert step_of(run, "ok")["decision"]["by"] == "gone"
    assert await listed(s) == []


async def test_a_gate_record_left_behind_is_neither_listed_nor_answered(
    stack: StackFactory,
) -> None:
    """A gate's record whose delete was lost (with a server, after its step's end was
    stored): the step's record says the gate ended, and the gateway believes it."""
    s = await stack(runners=1)
    run_id = await s.submit(DEPLOY)
    await s.wait_step(run_id, "ok", {"waiting"})
    async with gate_record(s, run_id) as (kv, key):
        left = (await kv.get(key)).value or b""
        status, _ = await s.request("POST", f"/api/runs/{run_id}/cancel")
        assert status == 202
        assert (await s.wait_run(run_id))["status"] == "cancelled"
        await kv.put(key, left)  # as if its delete had been lost
    assert await listed(s) == []
    status, body = await answer(s, run_id, "approve")
    assert status == 409 and "cancelled" in body["error"], body
