"""`heddle approve`, `heddle reject` and `heddle approvals` as subprocesses against a real
stack: a run whose step is an approval gate waits, listed by `approvals`, until it is
approved (the run goes on) or rejected (the step fails); a viewer may not answer (403, exit
4) and a gate is answered once (409, exit 4). The views without I/O:
tests/unit/cli/test_approvals_cli.py."""

from __future__ import annotations

import json

from heddle.shared.api import Client

from tests.support.cli import env_of, heddle
from tests.support.stack import StackFactory


def gated(run_id: str) -> str:
    steps = [
        {"id": "build", "command": "echo built"},
        {"id": "gate", "approval": {"message": "Ship it?"}, "dependsOn": ["build"]},
        {"id": "deploy", "command": "echo deployed", "dependsOn": ["gate"]},
    ]
    return json.dumps({"runId": run_id, "steps": steps})


async def test_a_gate_is_listed_then_approved_once(stack: StackFactory) -> None:
    s = await stack(runners=1)
    env = env_of(s)
    rc, out, err = await heddle("submit", "-", env=env, stdin=gated("ship"))
    assert (rc, out) == (0, "ship\n"), err
    await s.wait_step("ship", "gate", {"waiting"})

    rc, out, err = await heddle("approvals", env=env)
    assert rc == 0, err
    header, row = out.splitlines()
    assert header.split()[:4] == ["RUN", "STEP", "NAMESPACE", "WORKFLOW"]
    assert row.split()[:4] == ["ship", "gate", "default", "-"] and row.endswith("Ship it?")
    rc, out, err = await heddle("approvals", "--json", env=env)
    [waiting] = json.loads(out)["approvals"]
    assert (waiting["runId"], waiting["stepId"], waiting["message"]) == ("ship", "gate", "Ship it?")

    viewer = Client(s.base, token=s.admin_token).create_token("watcher", "viewer").token
    rc, _, err = await heddle("approve", "ship", "gate", env=env_of(s, viewer))
    assert rc == 4 and "403" in err, err

    rc, out, err = await heddle("approve", "ship", "gate", "--comment", "looks good", env=env)
    assert rc == 0, err
    assert out.startswith("step gate of run ship approved by ") and out.endswith(": looks good\n")
    rc, _, err = await heddle("reject", "ship", "gate", env=env)
    assert rc == 4 and "409" in err, err
    rc, out, err = await heddle("watch", "ship", env=env)
    assert rc == 0 and out.splitlines()[-1].startswith("run ship succeeded"), err
    rc, out, _ = await heddle("approvals", env=env)
    assert (rc, out) == (0, "no approvals waiting\n")


async def test_a_rejected_gate_fails_its_run(stack: StackFactory) -> None:
    s = await stack(runners=1)
    env = env_of(s)
    rc, _, err = await heddle("submit", "-", env=env, stdin=gated("stop"))
    assert rc == 0, err
    await s.wait_step("stop", "gate", {"waiting"})
    rc, out, err = await heddle(
        "reject", "stop", "gate", "--comment", "not today", "--json", env=env
    )
    assert rc == 0, err
    decision = json.loads(out)["decision"]
    assert (decision["approved"], decision["comment"]) == (False, "not today")
    rc, out, err = await heddle("watch", "stop", env=env)
    assert rc == 1, err
    run = Client(s.base, token=s.admin_token).run("stop")
    assert {st.id: st.status for st in run.steps} == {
        "build": "succeeded",
        "gate": "failed",
        "deploy": "skipped",
    }
