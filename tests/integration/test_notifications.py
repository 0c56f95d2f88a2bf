"""Notifications of a run's end against a real stack (docs/notifications.md): the summary
POSTed to a test server on 127.0.0.1, once; ``on`` filtering; a signed delivery; the run
document's ``notifications``. The target down and the gateway killed:
tests/fault/test_notify_faults.py; the pure parts: tests/unit/test_notify_plan.py."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from heddle.services.orchestrator.retention import Retention
from heddle.shared.broker.buckets import open_bucket
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.core import signatures
from heddle.shared.wire import names

from tests.support.namespaces import create_namespaces
from tests.support.receivers import Receiver
from tests.support.stack import StackFactory, eventually

FAILING = [{"id": "ok", "command": "true"}, {"id": "bad", "command": "exit 3"}]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = await Receiver().start()
    yield r
    await r.stop()


async def delivered(s: Any, run_id: str, index: int = 0) -> dict[str, Any]:
    """The run's document once its notification ``index`` is delivered."""
    found: dict[str, Any] = {}

    async def done() -> bool:
        found.update(await s.run(run_id))
        return found["notifications"][index]["state"] == "delivered"

    await eventually(done, f"notification {index} of run {run_id} delivered")
    return found


async def test_a_failed_run_s_summary_is_posted_once(
    stack: StackFactory, receiver: Receiver
) -> None:
    s = await stack(runners=1, HEDDLE_PUBLIC_URL="https://heddle.example.org/")
    doc = {"name": "build", "notify": [{"url": receiver.url, "on": ["failed"]}], "steps": FAILING}
    run_id = await s.submit(doc)
    run = await s.wait_run(run_id)
    assert run["status"] == "failed"
    run = await delivered(s, run_id)
    [sent] = receiver.of_run(run_id)
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.headers[signatures.HEDDLE_DELIVERY] == f"{run_id}.0"
    assert sent.headers["X-Heddle-Event"] == "run.failed"
    assert signatures.HEDDLE_HEADER not in sent.headers
    body = sent.json
    assert (body["runId"], body["namespace"], body["status"]) == (run_id, "default", "failed")
    assert (body["workflow"], body["trigger"]) == ("build", "api")
    assert (body["createdAt"], body["finishedAt"]) == (run["createdAt"], run["finishedAt"])
    assert body["failedSteps"] == [{"id": "bad", "reason": "exit code 3", "exitCode": 3}]
    assert body["url"] == f"https://heddle.example.org/#/runs/{run_id}"
    [shown] = run["notifications"]
    assert (shown["index"], shown["url"], shown["on"]) == (0, receiver.url, ["failed"])
    assert [a["status"] for a in shown["attempts"]] == [200]
    # Its retry carries the workflow's targets: it fails again, and is sent as a retry.
    status, body = await s.request("POST", f"/api/runs/{run_id}/retry")
    assert status == 201, body
    retry = body["runId"]
    await s.wait_run(retry)
    await delivered(s, retry)
    [again] = receiver.of_run(retry)
    assert (again.json["trigger"], again.json["status"]) == ("retry", "failed")
    assert len(receiver.of_run(run_id)) == 1


async def test_a_target_hears_only_the_ends_it_is_on(
    stack: StackFactory, receiver: Receiver
) -> None:
    s = await stack(runners=1)
    notify = [{"url": receiver.url, "on": ["failed"]}]
    quiet = await s.submit({"notify": notify, "steps": [{"id": "a", "command": "true"}]})
    assert (await s.wait_run(quiet))["status"] == "succeeded"
    loud = await s.submit({"notify": notify, "steps": FAILING})
    await s.wait_run(loud)
    await delivered(s, loud)
    # The failed run, submitted after, is delivered: the succeeded one was never sent.
    assert [d.json["runId"] for d in receiver.deliveries] == [loud]
    [target] = (await s.run(quiet))["notifications"]
    assert (target["state"], target["attempts"]) == (None, [])


async def test_a_namespaced_run_s_delivery_names_its_namespace(
    stack: StackFactory, receiver: Receiver
) -> None:
    s = await stack(runners=1)
    nc = await s.connect()
    try:
        await create_namespaces(nc, "team-a")
    finally:
        await nc.close()
    doc = {"namespace": "team-a", "runId": "told", "notify": [{"url": receiver.url}]}
    await s.submit({**doc, "steps": FAILING})

    async def sent() -> bool:
        return bool(receiver.of_run("told"))

    await eventually(sent, "the namespaced run's delivery")
    [delivery] = receiver.of_run("told")
    assert (delivery.json["runId"], delivery.json["namespace"]) == ("told", "team-a")
    assert delivery.headers[signatures.HEDDLE_DELIVERY] == "team-a=told.0"
    status, run = await s.request("GET", "/api/runs/told?namespace=team-a")
    assert status == 200 and run["notifications"][0]["url"] == receiver.url, run


async def test_a_registered_workflow_s_signed_target_verifies_with_its_secret(
    stack: StackFactory, receiver: Receiver
) -> None:
    """Signed with the secret made for the target; none made yet, nothing is sent and the
    attempt is an error, retried until one is."""
    s = await stack(runners=1, HEDDLE_NOTIFY_BACKOFF="0.3")
    notify = [{"url": receiver.url, "on": ["succeeded"], "secret": True}]
    doc = {"name": "nightly", "notify": notify, "steps": [{"id": "a", "command": "true"}]}
    status, body = await s.request("POST", "/api/workflows", json=doc)
    assert status == 201, body
    status, body = await s.request("POST", "/api/workflows/nightly/runs")
    assert status == 201, body
    run_id = body["runId"]
    await s.wait_run(run_id)

    async def refused() -> bool:
        return bool((await s.run(run_id))["notifications"][0]["attempts"])

    await eventually(refused, "an attempt without a secret")
    [first, *_] = (await s.run(run_id))["notifications"][0]["attempts"]
    assert (first["status"], first["error"]) == (None, "no secret is made for this target yet")
    assert receiver.of_run(run_id) == []
    secret = signatures.new_secret()
    nc = await s.connect()
    try:
        secrets = await nc.jetstream().key_value(names.SECRETS_BUCKET)
        await secrets.put(names.secret_key("nightly", "notify", "0"), secret.encode())
    finally:
        await nc.close()
    await delivered(s, run_id)
    [sent] = receiver.of_run(run_id)
    assert signatures.signed_by(secret, sent.body, sent.headers[signatures.HEDDLE_HEADER])
    assert not signatures.signed_by("another", sent.body, sent.headers[signatures.HEDDLE_HEADER])
    assert (sent.json["workflow"], sent.json["status"], sent.json["url"]) == (
        "nightly",
        "succeeded",
        None,
    )


async def test_the_sweep_makes_a_delivery_a_crash_lost_and_retention_removes_them(
    stack: StackFactory, receiver: Receiver
) -> None:
    """An end stored without its deliveries (an orchestrator that died between the two) gets
    them from the next retention sweep; one that exists is left as it is; a run deleted by
    retention takes its deliveries with it."""
    s = await stack(runners=1)
    notify = [{"url": receiver.url, "on": ["failed"]}, {"url": receiver.url, "on": ["failed"]}]
    run_id = await s.submit({"notify": notify, "steps": FAILING})
    await s.wait_run(run_id)
    await delivered(s, run_id, 0)
    await delivered(s, run_id, 1)
    nc = await s.connect()
    try:
        js = nc.jetstream()
        runs = await open_bucket(nc, js, names.RUNS_BUCKET)
        kv = await open_bucket(nc, js, names.NOTIFICATIONS_BUCKET)
        stream = names.kv_stream(names.NOTIFICATIONS_BUCKET)
        lost = names.kv_subject(names.NOTIFICATIONS_BUCKET, names.notification_key(run_id, 1))
        await js.purge_stream(stream, subject=lost)
        sweep = Retention(js, runs, keep_runs=0, keep_age=0, interval=60, notifications=kv)
        assert (await sweep.sweep()).notified == [names.notification_key(run_id, 1)]

        async def sent_again() -> bool:
            return len(receiver.of_run(run_id)) == 3

        await eventually(sent_again, "the delivery made again sent")
        assert (await s.run(run_id))["notifications"][0]["state"] == "delivered"
        assert (await sweep.sweep()).notified == []  # both exist: left alone
        aged = Retention(js, runs, keep_runs=0, keep_age=1, interval=60, notifications=kv)
        assert run_id in (await aged.sweep(now=time.time() + 60)).deleted
        assert await read_current(kv, names.notifications_of_run(run_id)) == []
    finally:
        await nc.close()
