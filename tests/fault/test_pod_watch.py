"""The orchestrator's pod watch end to end: a real stack whose orchestrator watches the runner
pods of a small Kubernetes API server on 127.0.0.1 (tests/support/fake_kube.py) through the real
client. A runner's pod is reported OOMKilled while its step runs (and the runner process is
SIGKILLed, as the kernel would): the step fails within 2 s, long before the heartbeat silence
limit (15 s here), with the pod's reason in the step and its log, and its retry succeeds on
the other runner. ``GET /api/runners`` lists the pods, a crash-looping pod whose agent never
registered among them."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import fake_kube as fk
from tests.support.stack import Stack, StackFactory, step_of

TRIALS = 5
SILENCE = {"HEDDLE_HEARTBEAT_INTERVAL": "5", "HEDDLE_HEARTBEAT_GRACE": "3"}  # 15 s


@pytest.fixture
async def api() -> AsyncIterator[fk.FakeKube]:
    server = await fk.FakeKube().start()
    yield server
    await server.stop()


async def pod_stack(
    stack: StackFactory, api: fk.FakeKube, tmp_path: Path, **settings: str
) -> Stack:
    for runner in ("runner-0", "runner-1"):
        api.add(fk.runner_pod(runner, node="kind-worker"))
    s = await stack(
        runners=2,
        HEDDLE_KUBECONFIG=str(api.kubeconfig(tmp_path / "kubeconfig")),
        HEDDLE_RUNNER_POD_SELECTOR=fk.SELECTOR,
        **SILENCE,
        **settings,
    )
    deadline = time.monotonic() + 15
    while api.watch_count() < 1:
        assert time.monotonic() < deadline, s.logs("orchestrator")
        await asyncio.sleep(0.05)
    return s


async def pods_of(s: Stack, want: set[str], timeout: float = 10.0) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        _, pool = await s.request("GET", "/api/runners")
        pods = {p["name"]: p for p in pool["pods"]}
        if want <= set(pods) or time.monotonic() > deadline:
            return pods
        await asyncio.sleep(0.05)


async def test_an_oom_killed_runner_pod_fails_its_step_at_once(
    stack: StackFactory, api: fk.FakeKube, tmp_path: Path
) -> None:
    s = await pod_stack(stack, api, tmp_path)
    latencies = []
    for trial in range(TRIALS):
        mark = tmp_path / f"ran-{trial}"
        # Attempt 1 sleeps (and is killed); attempt 2 finds the mark and succeeds.
        command = f'[ -e "{mark}" ] || {{ touch "{mark}"; exec sleep 60; }}'
        run_id = await s.submit({"steps": [{"id": "work", "command": command, "retries": 1}]})
        held = await s.wait_step(run_id, "work", {"running"}, timeout=15)
        victim = held["runner"]
        pod = f"{victim}-0"
        s.kill(victim, with_group=True)  # the container is gone, its step with it
        started = time.monotonic()
        api.modify(pod, fk.terminate)
        while True:
            step = step_of(await s.run(run_id), "work")
            if step["attempts"] and step["attempts"][0].get("reason"):
                break
            assert time.monotonic() - started < 10, step
            await asyncio.sleep(0.01)
        latencies.append(time.monotonic() - started)
        reason = f"runner pod {pod} OOMKilled (exit 137)"
        assert step["attempts"][0]["reason"] == reason
        assert latencies[-1] < 2.0, latencies
        run = await s.wait_run(run_id, timeout=20)
        work = step_of(run, "work")
        assert run["status"] == "succeeded", run
        assert work["attempt"] == 2 and work["runner"] != victim, work
        status, logs = await s.request(
            "GET", f"/api/runs/{run_id}/steps/work/logs", params={"attempt": "1"}
        )
        assert status == 200
        assert reason in str(logs), logs
        # The pod shows what happened to it.
        pods = await pods_of(s, {pod})
        assert pods[pod]["lastTermination"] == "OOMKilled (exit 137)", pods[pod]
        # The kubelet starts the container again: the runner comes back under its name.
        s.start(victim)
        api.modify(pod, fk.restart)
        await s.wait_ready(2)
    print(
        f"\npod event -> step failed, {TRIALS} trials: "
        f"p50 {statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
    )
    log = s.logs("orchestrator")
    assert "runner pod verdict" in log


async def test_the_pool_lists_the_pods_and_one_that_never_registered(
    stack: StackFactory, api: fk.FakeKube, tmp_path: Path
) -> None:
    s = await pod_stack(stack, api, tmp_path)
    api.add(fk.runner_pod("runner-9", node="kind-worker2"))
    api.modify("runner-9-0", fk.crash_looping)
    run_id = await s.submit({"steps": [{"id": "work", "command": "sleep 30"}]})
    held = await s.wait_step(run_id, "work", {"running"})
    pods = await pods_of(s, {"runner-0-0", "runner-1-0", "runner-9-0"})
    assert set(pods) == {"runner-0-0", "runner-1-0", "runner-9-0"}
    looping = pods["runner-9-0"]
    assert (looping["registered"], looping["status"], looping["reason"], looping["ready"]) == (
        False,
        None,
        "CrashLoopBackOff",
        False,
    )
    assert (looping["restarts"], looping["node"], looping["lastTermination"]) == (
        1,
        "kind-worker2",
        "Error (exit 1)",
    )
    busy = pods[f"{held['runner']}-0"]
    assert (busy["registered"], busy["status"], busy["phase"], busy["ready"]) == (
        True,
        "busy",
        "Running",
        True,
    )
    assert (busy["runId"], busy["stepId"], busy["attempt"]) == (run_id, "work", 1)
    assert busy["node"] == "kind-worker"
    # A deleted pod leaves the list (and its runner's step fails: it held one).
    api.delete(f"{held['runner']}-0")
    step = await s.wait_step(run_id, "work", {"failed"}, timeout=5)
    assert step["reason"] == f"runner pod {held['runner']}-0 deleted"
    deadline = time.monotonic() + 5
    while f"{held['runner']}-0" in await pods_of(s, set()):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def test_an_api_that_is_down_is_no_verdict(
    stack: StackFactory, api: fk.FakeKube, tmp_path: Path
) -> None:
    s = await pod_stack(stack, api, tmp_path)
    run_id = await s.submit({"steps": [{"id": "work", "command": "sleep 3"}]})
    await s.wait_step(run_id, "work", {"running"})
    api.down = True
    api.close_watches()
    await asyncio.sleep(1.0)
    run = await s.wait_run(run_id, timeout=20)
    assert run["status"] == "succeeded"
    assert len(step_of(run, "work")["attempts"]) == 1
    assert "not answering" in s.logs("orchestrator")
