"""Liveness with real processes: dead, frozen, skewed and reconnecting runners.

Intervals are shortened through settings (tests/conftest.py FAST): heartbeat every 0.2 s,
grace 3, watchdog scan 0.2 s.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import time

import pytest

from tests.conftest import StackFactory
from tests.stack import descendants, process_exists, step_of

INTERVAL, GRACE, SCAN = 0.2, 3, 0.2
pytestmark = pytest.mark.fault


def chain(first: str, retries: int = 0) -> dict:
    return {
        "steps": [
            {"id": "work", "command": first, "retries": retries},
            {"id": "after", "command": "true", "dependsOn": ["work"]},
            {"id": "last", "command": "true", "dependsOn": ["after"]},
        ]
    }


async def running_on(s, run_id: str, step: str = "work") -> str:
    return (await s.wait_step(run_id, step, {"running"}))["runner"]


async def test_killed_runner_is_declared_silent_within_the_bound(stack: StackFactory) -> None:
    s = await stack(runners=1)
    run_id = await s.submit(chain("sleep 30"))
    runner = await running_on(s, run_id)
    children = descendants(s.procs[runner].pid)
    killed_at = time.monotonic()
    s.kill(runner, with_group=True)
    work = await s.wait_step(run_id, "work", {"failed"}, timeout=10)
    detected = time.monotonic() - killed_at
    assert detected <= INTERVAL * GRACE + SCAN + 1.0, detected
    assert work["reason"].startswith(f"runner {runner} silent for ")
    run = await s.wait_run(run_id)
    assert run["status"] == "failed"
    assert [step_of(run, x)["status"] for x in ("after", "last")] == ["skipped", "skipped"]
    assert step_of(run, "last")["reason"] == "skipped because step work failed"
    assert not [p for p in children if process_exists(p)]


async def test_frozen_runner_is_failed_and_its_late_reports_change_nothing(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    run_id = await s.submit({"steps": [{"id": "work", "command": "sleep 1.5"}]})
    runner = await running_on(s, run_id)
    s.kill(runner, signal.SIGSTOP)
    try:
        work = await s.wait_step(run_id, "work", {"failed"}, timeout=10)
    finally:
        s.kill(runner, signal.SIGCONT)
    assert "silent" in work["reason"]
    # Once thawed the runner heartbeats and reports again; none of it counts.
    await asyncio.sleep(2.5)
    run = await s.run(run_id)
    after = step_of(run, "work")
    assert (run["status"], after["status"], after["reason"]) == ("failed", "failed", work["reason"])
    assert after["finishedAt"] == work["finishedAt"] and len(after["attempts"]) == 1
    assert s.procs[runner].alive()


async def test_long_healthy_step_is_never_failed(stack: StackFactory) -> None:
    s = await stack(runners=1)
    run_id = await s.submit({"steps": [{"id": "work", "command": "sleep 3"}]})
    seen = set()
    while True:
        step = step_of(await s.run(run_id), "work")
        if step["status"] in ("succeeded", "failed"):
            break
        if step["status"] == "running" and step["lastHeartbeatAt"]:
            seen.add(step["lastHeartbeatAt"])
        await asyncio.sleep(0.1)
    assert step["status"] == "succeeded"
    assert len(seen) >= 5, seen


async def test_runner_with_a_clock_an_hour_off_succeeds(stack: StackFactory) -> None:
    assert shutil.which("faketime"), "faketime is missing: `make test` installs it"
    s = await stack(runners=0)
    s.start("runner-skewed", argv_prefix=["faketime", "-f", "+1h"])
    await s.wait_ready(1)
    run_id = await s.submit({"steps": [{"id": "work", "command": "sleep 2"}]})
    run = await s.wait_run(run_id)
    work = step_of(run, "work")
    assert (work["status"], work["runner"]) == ("succeeded", "runner-skewed")
    # The runner's own timestamps are an hour ahead; the verdict never used them.
    assert work["startedAt"] > run["createdAt"]


async def test_pool_joins_and_leaves(stack: StackFactory) -> None:
    s = await stack(runners=1)
    run_id = await s.submit({"steps": [{"id": f"s{i}", "command": "sleep 0.4"} for i in range(6)]})
    await s.wait_step(run_id, "s0", {"running", "succeeded"})
    s.start("runner-late")
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "succeeded"
    assert "runner-late" in {st["runner"] for st in run["steps"]}
    status, pool = await s.request("GET", "/api/runners")
    assert status == 200
    assert {r["name"] for r in pool["runners"]} == {"runner-0", "runner-late"}
    s.kill("runner-late")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        _, pool = await s.request("GET", "/api/runners")
        if pool["total"] == 1:
            break
        await asyncio.sleep(0.1)
    assert [r["name"] for r in pool["runners"]] == ["runner-0"]


async def test_broker_outage_is_not_a_death(stack: StackFactory) -> None:
    s = await stack(runners=3, HEDDLE_HEARTBEAT_INTERVAL="0.5")
    run_id = await s.submit({"steps": [{"id": f"s{i}", "command": "sleep 8"} for i in range(3)]})
    for i in range(3):
        await s.wait_step(run_id, f"s{i}", {"running"})
    assert s.nats is not None
    s.nats.kill()
    await asyncio.sleep(5)
    s.nats.start()
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "succeeded", run
    for st in run["steps"]:
        assert (st["status"], len(st["attempts"])) == ("succeeded", 1), st
