"""A release driven end to end, against a real stack: a signed push starts it (a webhook), it
builds by calling another workflow (a child run), waits for a person at a gate, deploys what
the child built, and its end is POSTed to a target (a notification); the Python client
answers the gate and waits. Each part alone: test_webhooks.py, test_sub_workflows.py,
test_approvals.py, test_notifications.py, test_client.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from heddle.shared.api import AsyncClient
from heddle.shared.core.signatures import HEDDLE_DELIVERY, HEDDLE_HEADER, sign

from tests.support.receivers import Receiver
from tests.support.stack import StackFactory, eventually

BUILD = {
    "name": "build",
    "params": [{"name": "ref"}],
    "steps": [
        {
            "id": "compile",
            "command": 'echo "image=app:${HEDDLE_PARAM_REF##*/}" >> "$HEDDLE_OUTPUTS"',
        }
    ],
}
DEPLOY = 'echo "shipped=$HEDDLE_OUT_BUILD_COMPILE_IMAGE" >> "$HEDDLE_OUTPUTS"'


def release(target: str) -> dict[str, object]:
    return {
        "name": "release",
        "params": [{"name": "ref"}],
        "webhooks": [{"name": "push", "params": {"ref": "body.ref"}}],
        "notify": [{"url": target, "on": ["succeeded", "failed"]}],
        "steps": [
            {"id": "build", "workflow": {"name": "build", "params": {"ref": "refs/heads/main"}}},
            {"id": "gate", "dependsOn": ["build"], "approval": {"message": "Ship it?"}},
            {"id": "deploy", "dependsOn": ["gate"], "command": DEPLOY},
        ],
    }


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = await Receiver().start()
    yield r
    await r.stop()


async def test_a_pushed_release_builds_waits_for_its_gate_ships_and_says_so(
    stack: StackFactory, receiver: Receiver
) -> None:
    s = await stack(runners=1)
    async with AsyncClient(s.base, token=s.admin_token) as client:
        await client.register(BUILD)
        await client.register(release(receiver.url))
        status, made = await s.request("POST", "/api/workflows/release/webhooks/push/secret")
        assert status == 201, made
        body = json.dumps({"ref": "refs/heads/main", "after": "6113728"}).encode()
        headers = {
            "Content-Type": "application/json",
            HEDDLE_HEADER: sign(made["secret"], body),
            HEDDLE_DELIVERY: "push-1",
        }
        http = await s.http()
        async with http.post(f"{s.base}/hooks/release/push", data=body, headers=headers) as r:
            assert r.status == 201, await r.text()
            run_id = (await r.json())["runId"]

        async def gate_waits() -> bool:
            run = await client.run(run_id)
            return {st.id: st.status for st in run.steps}["gate"] == "waiting"

        await eventually(gate_waits, "the gate waits once the child built")
        answer = await client.approve(run_id, "gate", "build is green")
        assert answer.decision.approved and answer.decision.comment == "build is green"
        run = await client.wait(run_id, timeout=60)

    assert (run.status, run.trigger, run.params) == (
        "succeeded",
        "webhook",
        {"ref": "refs/heads/main"},
    )
    steps = {st.id: st for st in run.steps}
    assert steps["deploy"].outputs == {"shipped": "app:main"}  # the child's output, through
    assert steps["gate"].decision is not None and steps["gate"].decision.by
    child = steps["build"].child_run
    assert child is not None
    child_doc = await s.run(child)
    assert (child_doc["parentRun"], child_doc["parentStep"]) == (run_id, "build")

    async def told() -> bool:
        return len(receiver.of_run(run_id)) == 1

    await eventually(told, "the release's end POSTed to its target")
    [sent] = receiver.of_run(run_id)
    assert (sent.json["status"], sent.json["workflow"]) == ("succeeded", "release")
    assert receiver.of_run(child) == []  # the child's workflow has no targets
