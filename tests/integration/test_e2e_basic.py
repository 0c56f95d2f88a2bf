"""A workflow of real shell steps through all four services, against a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import time

from heddle.services.dispatcher.ready import LOOKAHEAD
from heddle.shared.core.partitions import partition_of
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.timefmt import parse
from nats.js.errors import NotFoundError

from tests.support.stack import StackFactory, step_of
from tests.support.workflows import EXAMPLE


async def test_example_runs_in_dependency_order(stack: StackFactory) -> None:
    s = await stack(runners=4)
    run_id = await s.submit(EXAMPLE)
    run = await s.wait_run(run_id)
    assert run["status"] == "succeeded", run
    a, b, c, d = (step_of(run, x) for x in "ABCD")
    assert all(x["status"] == "succeeded" and x["exitCode"] == 0 for x in (a, b, c, d))
    assert a["stdoutTail"] == "hello"
    # B and C overlap in time; D starts after both finish.
    assert parse(b["startedAt"]) < parse(c["finishedAt"])
    assert parse(c["startedAt"]) < parse(b["finishedAt"])
    assert parse(d["startedAt"]) >= max(parse(b["finishedAt"]), parse(c["finishedAt"]))
    assert parse(b["startedAt"]) >= parse(a["finishedAt"])
    assert run["edges"] == [
        {"from": "A", "to": "B"},
        {"from": "A", "to": "C"},
        {"from": "B", "to": "D"},
        {"from": "C", "to": "D"},
    ]
    assert run["finishedAt"] is not None and run["createdAt"].endswith("Z")


async def test_failure_skips_downstream(stack: StackFactory) -> None:
    s = await stack(runners=4)
    doc = {"steps": [dict(x) for x in EXAMPLE["steps"]]}
    doc["steps"][1]["command"] = "echo oops >&2; exit 3"
    run = await s.wait_run(await s.submit(doc))
    assert run["status"] == "failed"
    b, c, d = (step_of(run, x) for x in "BCD")
    assert (b["status"], b["exitCode"], b["stderrTail"]) == ("failed", 3, "oops")
    assert b["reason"] == "exit code 3"
    assert c["status"] == "succeeded"
    assert d["status"] == "skipped" and "B" in d["reason"] and d["startedAt"] is None


async def test_saturated_pool_queues_and_never_overbooks(stack: StackFactory) -> None:
    s = await stack(runners=2)
    doc = {"steps": [{"id": f"s{i}", "command": "sleep 0.3"} for i in range(10)]}
    run = await s.wait_run(await s.submit(doc), timeout=60)
    assert run["status"] == "succeeded"
    events = []
    for st in run["steps"]:
        events.append((parse(st["startedAt"]), 1))
        events.append((parse(st["finishedAt"]), -1))
    running = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        running += delta
        peak = max(peak, running)
    assert peak == 2
    assert len({st["runner"] for st in run["steps"]}) == 2


async def test_the_dispatcher_holds_the_next_steps_while_every_runner_is_busy(
    stack: StackFactory,
) -> None:
    # A window wider than the run: every step is in the stream or in hand, none held back.
    s = await stack(runners=1, HEDDLE_RUN_WINDOW="100")
    gate = s.tmp / "gate"  # every step runs until it exists
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    doc = {"steps": [{"id": f"s{i}", "command": wait} for i in range(LOOKAHEAD + 3)]}
    run_id = await s.submit(doc)
    deadline = time.monotonic() + 30
    while not any(st["status"] == "running" for st in (await s.run(run_id))["steps"]):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    nc = await s.connect()
    try:
        info = await nc.jetstream().consumer_info(
            names.STEPS_STREAM, names.DISPATCHER_OPENING_DURABLE
        )
    finally:
        await nc.close()
    # LOOKAHEAD ready steps in hand for when the runner frees up; the rest wait on the
    # server, where another dispatcher could take them.
    assert (info.num_ack_pending, info.num_pending) == (LOOKAHEAD, 2)
    gate.touch()
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "succeeded"
    assert len({st["runner"] for st in run["steps"]}) == 1


async def test_step_environment(stack: StackFactory) -> None:
    s = await stack(runners=1)
    doc = {
        "runId": "envrun",
        "steps": [
            {"id": "show", "command": 'echo "$HEDDLE_RUN_ID $HEDDLE_STEP_ID $HEDDLE_ATTEMPT"'}
        ],
    }
    run = await s.wait_run(await s.submit(doc))
    assert step_of(run, "show")["stdoutTail"] == "envrun show 1"


async def test_same_run_id_twice_creates_one_run(stack: StackFactory) -> None:
    s = await stack(runners=1)
    doc = {"runId": "once", "steps": [{"id": "x", "command": "echo $$"}]}
    status, body = await s.request("POST", "/api/runs", json=doc)
    assert (status, body["runId"]) == (201, "once")
    status, body = await s.request("POST", "/api/runs", json=doc)
    assert (status, body["runId"]) == (200, "once")
    run = await s.wait_run("once")
    assert len(step_of(run, "x")["attempts"]) == 1
    # The legacy route takes workflowId as the run id and reads it back the same way.
    status, body = await s.request(
        "POST",
        "/workflow",
        json={"workflowId": "legacy", "steps": [{"id": "x", "command": "true"}]},
    )
    assert (status, body["runId"]) == (201, "legacy")
    status, body = await s.request("GET", "/workflow/legacy")
    assert status == 200 and body["runId"] == "legacy"


async def test_runners_document(stack: StackFactory) -> None:
    s = await stack(runners=2)
    status, body = await s.request("GET", "/api/runners")
    assert status == 200
    assert (body["total"], body["available"], body["leased"]) == (2, 2, [])
    assert {r["name"] for r in body["runners"]} == {"runner-0", "runner-1"}
    for r in body["runners"]:
        assert r["status"] == "idle" and r["pid"] > 0 and r["lastSeenAt"].endswith("Z")
    run_id = await s.submit({"steps": [{"id": "long", "command": "sleep 2"}]})
    await s.wait_step(run_id, "long", {"running"})
    # The registry shows a status change within its coalescing window (0.1 s).
    for _ in range(40):
        status, pods = await s.request("GET", "/pods")
        if pods["available"] == 1:
            break
        await asyncio.sleep(0.05)
    assert pods["available"] == 1
    assert pods["leased"][0]["runId"] == run_id and pods["leased"][0]["stepId"] == "long"
    busy = next(r for r in pods["runners"] if r["status"] == "busy")
    assert busy["runId"] == run_id and busy["attempt"] == 1


async def test_health_and_metrics(stack: StackFactory) -> None:
    s = await stack(runners=1)
    assert (await s.request("GET", "/healthz"))[0] == 200
    assert (await s.request("GET", "/readyz"))[0] == 200
    await s.request("GET", "/api/runs/nope")
    status, text = await s.request("GET", "/metrics")
    assert status == 200
    line = 'heddle_http_requests_total{method="GET",route="/api/runs/{run}",status="404"} 1.0'
    assert line in text.splitlines()


async def test_submit_without_orchestrator_is_accepted_then_created(stack: StackFactory) -> None:
    s = await stack(
        runners=1, services=("dispatcher", "gateway"), HEDDLE_SUBMIT_CONFIRM_TIMEOUT="0.5"
    )
    status, body = await s.request(
        "POST", "/api/runs", json={"runId": "later", "steps": [{"id": "x", "command": "echo late"}]}
    )
    assert (status, body["status"]) == (202, "accepted")
    assert (await s.request("GET", "/api/runs/later"))[0] == 404
    s.start("orchestrator")
    run = await s.wait_run("later", timeout=20)
    assert run["status"] == "succeeded" and step_of(run, "x")["stdoutTail"] == "late"


async def test_a_run_id_that_exists_answers_200_at_any_age(stack: StackFactory) -> None:
    """Past the stream's duplicate window (here: the command stream made anew, so it
    remembers no message id) and after the orchestrator forgot what it finished, a submit
    with an existing runId still answers 200 with the run as it is, and changes nothing."""
    s = await stack(runners=1)
    doc = {"runId": "old", "steps": [{"id": "x", "command": "echo first"}]}
    done = await s.wait_run(await s.submit(doc))
    async with await s.connect() as nc:
        await nc.jetstream().delete_stream(names.CMD_STREAM)
        s.kill("orchestrator")
        s.start("orchestrator")  # makes the command stream again, with no message ids in it
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(NotFoundError):
                durable = names.orch_cmd_durable(partition_of("old", Settings().partitions))
                await nc.jetstream().consumer_info(names.CMD_STREAM, durable)
                break
            assert time.monotonic() < deadline, s.logs("orchestrator")[-2000:]
            await asyncio.sleep(0.05)
    again = {"runId": "old", "steps": [{"id": "x", "command": "echo second"}]}
    status, body = await s.request("POST", "/api/runs", json=again)
    assert (status, body) == (
        200,
        {"runId": "old", "status": "succeeded", "created": False, "namespace": "default"},
    )
    assert await s.run("old") == done


async def test_resubmitting_a_finished_run_after_a_restart_changes_nothing(
    stack: StackFactory,
) -> None:

    from heddle.shared.wire import names
    from heddle.shared.wire.contracts import StepSpec, SubmitRun, encode

    s = await stack(runners=1)
    done = await s.wait_run(
        await s.submit({"runId": "old", "steps": [{"id": "x", "command": "echo first"}]})
    )
    s.kill("orchestrator")
    s.start("orchestrator")  # forgets what it finished; only KV remembers
    nc = await s.connect()
    try:
        again = SubmitRun(
            run_id="old",
            steps=[StepSpec(id="x", command="echo second")],
            submitted_at="2026-01-01T00:00:00Z",
        )
        stored = await nc.subscribe(names.run_stored("old"), max_msgs=1)
        # A different message id, as a retry after the dedupe window would have.
        await nc.jetstream().publish(
            names.cmd_submit("old"), encode(again), headers={"Nats-Msg-Id": "later-retry"}
        )
        await stored.next_msg(timeout=10)  # answered as a duplicate
    finally:
        await nc.close()
    run = await s.run("old")
    assert run == done


async def test_large_run_is_stored_in_bulk_and_completes(stack: StackFactory) -> None:
    s = await stack(runners=4)
    steps = [{"id": "root", "command": "true"}]
    steps += [{"id": f"s{i}", "command": "true", "dependsOn": ["root"]} for i in range(600)]
    steps.append({"id": "join", "command": "true", "dependsOn": [f"s{i}" for i in range(600)]})
    run_id = await s.submit({"steps": steps})
    created = await s.run(run_id)  # 201 means every step record is readable at once
    assert len(created["steps"]) == 602
    assert {st["status"] for st in created["steps"][1:]} <= {
        "pending",
        "queued",
        "running",
        "succeeded",
    }
    run = await s.wait_run(run_id, timeout=60)
    assert run["status"] == "succeeded" and run["counts"] == {"succeeded": 602}
