"""Approval gates against a real stack (docs/approvals.md): a gate waits with no runner
until an operator approves it (the run goes on) or rejects it (the step and run fail), or
its timeout fails it; it is answered exactly once; the list shows the gates waiting; a cancel
cancels a waiting gate. The state machine's side alone:
tests/unit/orchestrator/test_gates_state.py; an orchestrator killed meanwhile:
tests/fault/test_approvals_faults.py."""

from __future__ import annotations

import asyncio

from tests.support.approvals import DEPLOY, answer, listed, make_token, with_token
from tests.support.namespaces import create_namespaces, granted_token
from tests.support.run_events import events
from tests.support.stack import StackFactory, step_of, step_statuses


async def test_an_approved_gate_lets_its_run_go_on_and_keeps_its_answer(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    alice = await make_token(s, "alice", "operator")
    run_id = await s.submit(DEPLOY)
    gate = await s.wait_step(run_id, "ok", {"waiting"})
    assert gate["approval"] == {"message": "Ship build 7?"}
    assert gate["waitingFor"]["reason"] == "approval"
    assert gate["waitingFor"]["message"] == "Ship build 7?"
    assert gate["runner"] is None and gate["decision"] is None
    status, body = await s.request("GET", "/api/approvals")
    assert status == 200
    [waiting] = body["approvals"]
    assert waiting["runId"] == run_id and waiting["stepId"] == "ok"
    assert (waiting["namespace"], waiting["message"]) == ("default", "Ship build 7?")
    assert waiting["since"] == gate["startedAt"] and waiting["deadlineAt"] is None

    status, body = await answer(s, run_id, "approve", headers=alice, comment="staging is green")
    assert status == 200, body
    assert body["decision"]["approved"] is True and body["decision"]["by"] == "alice"
    run = await s.wait_run(run_id)
    assert run["status"] == "succeeded"
    assert step_statuses(run) == {"build": "succeeded", "ok": "succeeded", "ship": "succeeded"}
    decision = step_of(run, "ok")["decision"]
    assert (decision["approved"], decision["by"], decision["comment"]) == (
        True,
        "alice",
        "staging is green",
    )
    assert await listed(s) == []
    # Any later answer is refused, saying how and by whom it was answered.
    status, body = await answer(s, run_id, "reject")
    assert status == 409 and "approved by alice" in body["error"], body


async def test_a_rejected_gate_fails_its_step_and_its_run(stack: StackFactory) -> None:
    s = await stack(runners=1)
    run_id = await s.submit(DEPLOY)
    await s.wait_step(run_id, "ok", {"waiting"})
    status, body = await answer(s, run_id, "reject", comment="not on a Friday")
    assert status == 200 and body["decision"]["approved"] is False, body
    run = await s.wait_run(run_id)
    assert run["status"] == "failed"
    assert step_statuses(run) == {"build": "succeeded", "ok": "failed", "ship": "skipped"}
    ok = step_of(run, "ok")
    assert ok["reason"].startswith("rejected by ") and ok["reason"].endswith("not on a Friday")
    status, body = await answer(s, run_id, "approve")
    assert status == 409 and "rejected by" in body["error"], body


async def test_a_gate_not_answered_in_time_fails(stack: StackFactory) -> None:
    s = await stack(runners=1)
    doc = {"steps": [{"id": "ok", "approval": {"message": "quick?", "timeoutSeconds": 0.5}}]}
    run_id = await s.submit(doc)
    run = await s.wait_run(run_id, timeout=20)
    ok = step_of(run, "ok")
    assert (run["status"], ok["status"]) == ("failed", "failed")
    assert ok["decision"]["by"] == "timeout" and ok["decision"]["approved"] is False
    assert "timed out" in ok["reason"]
    status, body = await answer(s, run_id, "approve")
    assert status == 409 and "timed out" in body["error"], body


async def test_concurrent_answers_one_wins(stack: StackFactory) -> None:
    s = await stack(runners=1)
    run_id = await s.submit(DEPLOY)
    await s.wait_step(run_id, "ok", {"waiting"})
    verbs = ["approve", "reject"] * 4
    answers = await asyncio.gather(*(answer(s, run_id, v) for v in verbs))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] + [409] * 7, answers
    [(winner, _)] = [(v, b) for v, (st, b) in zip(verbs, answers, strict=True) if st == 200]
    run = await s.wait_run(run_id)
    assert run["status"] == ("succeeded" if winner == "approve" else "failed")


async def test_who_may_answer_and_what_is_refused(stack: StackFactory) -> None:
    s = await stack(runners=1)
    viewer = await make_token(s, "vera", "viewer")
    chain = {
        "steps": [
            {"id": "a", "command": "true"},
            {"id": "ok", "dependsOn": ["a"], "approval": {"message": "first"}},
            {"id": "again", "dependsOn": ["ok"], "approval": {"message": "second"}},
        ]
    }
    run_id = await s.submit(chain)
    await s.wait_step(run_id, "ok", {"waiting"})
    status, body = await answer(s, run_id, "approve", headers=viewer)
    assert status == 403 and body["needs"] == "operator", body
    status, _ = await s.request("GET", "/api/approvals", headers=viewer)
    assert status == 200
    # A step that is not a gate; a gate not waiting yet; a run or step that does not exist.
    status, body = await answer(s, run_id, "approve", step="a")
    assert status == 409 and "not an approval gate" in body["error"], body
    status, body = await answer(s, run_id, "approve", step="again")
    assert status == 409 and "not waiting" in body["error"], body
    assert (await answer(s, "nope", "approve"))[0] == 404
    assert (await answer(s, run_id, "approve", step="nope"))[0] == 404
    # A bad body: every problem named.
    status, body = await answer(s, run_id, "approve", comment="x" * 4097, color="red")
    assert status == 400
    assert sorted(p["path"] for p in body["problems"]) == ["color", "comment"], body
    assert await listed(s) == [(run_id, "ok")]
    assert await listed(s, "?namespace=default") == [(run_id, "ok")]


async def test_a_cancel_cancels_a_waiting_gate(stack: StackFactory) -> None:
    s = await stack(runners=1)
    run_id = await s.submit(DEPLOY)
    await s.wait_step(run_id, "ok", {"waiting"})
    status, _ = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert status == 202
    run = await s.wait_run(run_id)
    assert run["status"] == "cancelled"
    assert step_statuses(run)["ok"] == "cancelled"
    assert await listed(s) == []
    status, body = await answer(s, run_id, "approve")
    assert status == 409 and "cancelled" in body["error"], body


async def test_a_gate_holds_no_runner(stack: StackFactory) -> None:
    """One runner: the command beside a waiting gate runs and ends while the gate waits."""
    s = await stack(runners=1)
    doc = {
        "steps": [
            {"id": "ok", "approval": {"message": "go?"}},
            {"id": "work", "command": "echo done"},
            {"id": "more", "dependsOn": ["work"], "command": "true"},
        ]
    }
    run_id = await s.submit(doc)
    await s.wait_step(run_id, "more", {"succeeded"})
    run = await s.run(run_id)
    assert step_statuses(run) == {"ok": "waiting", "work": "succeeded", "more": "succeeded"}
    assert (await answer(s, run_id, "approve"))[0] == 200
    assert (await s.wait_run(run_id))["status"] == "succeeded"


async def test_gates_are_their_namespace_s(stack: StackFactory) -> None:
    """Another namespace's gate answers as one that does not exist, and is not listed; a
    viewer of its own namespace is told the role it needs."""
    s = await stack(runners=1)
    nc = await s.connect()
    await create_namespaces(nc, "team-a", "team-b")
    await nc.close()
    a_admin = with_token(await granted_token(s.base, s.admin_token, "a-ad", {"team-a": "admin"}))
    a_op = with_token(await granted_token(s.base, s.admin_token, "a-op", {"team-a": "operator"}))
    a_viewer = with_token(await granted_token(s.base, s.admin_token, "a-v", {"team-a": "viewer"}))
    b_op = with_token(await granted_token(s.base, s.admin_token, "b-op", {"team-b": "operator"}))
    status, body = await s.request("POST", "/api/runs", json=DEPLOY, headers=a_admin)
    assert status in (201, 202), body
    run_id = body["runId"]
    await s.wait_step(f"{run_id}?namespace=team-a", "ok", {"waiting"})
    status, body = await answer(s, run_id, "approve", headers=b_op)
    assert status == 404 and body["error"] == f"run {run_id!r} not found", body
    status, body = await answer(s, run_id, "approve", headers=b_op, query="?namespace=team-a")
    assert status == 404, body
    status, body = await s.request("GET", "/api/approvals", headers=b_op)
    assert (status, body["approvals"]) == (200, [])
    status, _ = await s.request("GET", "/api/approvals?namespace=team-a", headers=b_op)
    assert status == 404
    status, body = await answer(s, run_id, "approve", headers=a_viewer)
    assert status == 403 and body["needs"] == "operator", body
    status, body = await s.request("GET", "/api/approvals", headers=a_viewer)
    assert [(g["runId"], g["namespace"]) for g in body["approvals"]] == [(run_id, "team-a")]
    assert await listed(s, "?namespace=team-a") == [(run_id, "ok")]  # the system's admin
    status, body = await answer(s, run_id, "approve", headers=a_op)
    assert status == 200 and body["namespace"] == "team-a", body
    run = await s.wait_run(f"{run_id}?namespace=team-a")
    assert run["status"] == "succeeded"


async def test_a_followed_run_shows_its_gate_wait_and_end(stack: StackFactory) -> None:
    s = await stack(runners=1)
    run_id = await s.submit(DEPLOY)
    following = asyncio.create_task(events(s, run_id))
    await s.wait_step(run_id, "ok", {"waiting"})
    assert (await answer(s, run_id, "approve"))[0] == 200
    got = await following
    seen = [d.get("status") for _, d in got if d.get("stepId") == "ok"]
    assert "waiting" in seen and seen[-1] == "succeeded", got
