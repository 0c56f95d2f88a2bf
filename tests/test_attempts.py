"""The life of an attempt with real processes: retries with backoff, timeouts that kill the
whole process group, cancellation, a runner dying mid-step, an orchestrator dying mid-backoff.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from heddle.shared.core.backoff import backoff_bounds
from heddle.shared.wire.timefmt import parse

from bench.procfs import group_members
from tests.conftest import StackFactory
from tests.stack import step_of

pytestmark = pytest.mark.fault
KILL_GRACE = 1.0  # tests/conftest.py FAST


def counter_command(path: Path, succeed_at: int) -> str:
    return (
        f"n=$(cat {path} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {path}; "
        f"[ $n -ge {succeed_at} ]"
    )


async def test_fails_twice_then_succeeds_within_backoff_bounds(
    stack: StackFactory, tmp_path: Path
) -> None:
    base = 0.4
    s = await stack(runners=2, HEDDLE_RETRY_BASE=str(base), HEDDLE_RETRY_CAP="10")
    cmd = counter_command(tmp_path / "count", succeed_at=3)
    run = await s.wait_run(await s.submit({"steps": [{"id": "x", "command": cmd, "retries": 3}]}))
    x = step_of(run, "x")
    assert (x["status"], x["attempt"], run["status"]) == ("succeeded", 3, "succeeded")
    attempts = x["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    assert [a["exitCode"] for a in attempts] == [1, 1, 0]
    assert attempts[0]["reason"] == "exit code 1"
    for n in (1, 2):
        low, high = backoff_bounds(n, base, 10)
        gap = parse(attempts[n]["startedAt"]) - parse(attempts[n - 1]["finishedAt"])
        # The wait counts from when the orchestrator heard of the failure (a little after
        # the runner's finishedAt), plus dispatch and spawn: allow 0.15 s above the bound.
        assert low <= gap.total_seconds() <= high + 0.15, (n, gap, low, high)


async def test_always_failing_step_uses_every_attempt_then_skips_downstream(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2, HEDDLE_RETRY_BASE="0.1")
    run = await s.wait_run(
        await s.submit(
            {
                "steps": [
                    {"id": "x", "command": "exit 7", "retries": 2},
                    {"id": "y", "command": "true", "dependsOn": ["x"]},
                ]
            }
        )
    )
    x, y = step_of(run, "x"), step_of(run, "y")
    assert (x["status"], x["attempt"], len(x["attempts"])) == ("failed", 3, 3)
    assert x["reason"] == "exit code 7" and x["exitCode"] == 7
    assert (y["status"], y["reason"]) == ("skipped", "skipped because step x failed")


@pytest.mark.parametrize(
    "command",
    [
        "sleep 60",
        "trap '' TERM; sleep 60",  # ignores TERM: needs the KILL after the grace
        "sleep 100 & sleep 100 & sleep 60",  # background children die with it
    ],
)
async def test_timeout_kills_the_whole_process_group(stack: StackFactory, command: str) -> None:
    s = await stack(runners=1)
    run_id = await s.submit({"steps": [{"id": "x", "command": command, "timeoutSeconds": 1}]})
    running = await s.wait_step(run_id, "x", {"running"})
    t0 = time.monotonic()
    pgid = running["attempts"][0]["pid"]
    assert group_members(pgid), "the step's process group should be alive while it runs"
    x = await s.wait_step(run_id, "x", {"failed"}, timeout=15)
    assert time.monotonic() - t0 <= 1 + KILL_GRACE + 1
    assert x["reason"] == "timed out after 1 s"
    assert group_members(pgid) == []


async def test_cancel_kills_running_work_and_cancels_the_rest(stack: StackFactory) -> None:
    s = await stack(runners=2)
    run_id = await s.submit(
        {
            "steps": [
                {"id": "long", "command": "sleep 60"},
                {"id": "next", "command": "true", "dependsOn": ["long"]},
                {"id": "last", "command": "true", "dependsOn": ["next"]},
            ]
        }
    )
    pgid = (await s.wait_step(run_id, "long", {"running"}))["attempts"][0]["pid"]
    t0 = time.monotonic()
    status, body = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert (status, body["status"]) == (202, "cancelling")
    run = await s.wait_run(run_id, timeout=15)
    assert time.monotonic() - t0 <= 2 + KILL_GRACE
    assert run["status"] == "cancelled"
    assert {st["status"] for st in run["steps"]} == {"cancelled"}
    assert step_of(run, "long")["reason"] == "cancelled"
    assert group_members(pgid) == []
    # Cancelling again is harmless; a finished run is a conflict; an unknown one not found.
    status, body = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert (status, body["status"]) == (200, "cancelled")
    done = await s.wait_run(await s.submit({"steps": [{"id": "q", "command": "true"}]}))
    status, body = await s.request("POST", f"/api/runs/{done['runId']}/cancel")
    assert (status, body["status"]) == (409, "succeeded")
    status, _ = await s.request("POST", "/api/runs/nope/cancel")
    assert status == 404


async def test_dead_runner_step_retries_at_once_on_another_runner(stack: StackFactory) -> None:
    s = await stack(runners=2, HEDDLE_RETRY_BASE="30")  # a backoff would show as a long wait
    run_id = await s.submit({"steps": [{"id": "x", "command": "sleep 1", "retries": 1}]})
    first = (await s.wait_step(run_id, "x", {"running"}))["runner"]
    s.kill(first, with_group=True)
    run = await s.wait_run(run_id, timeout=20)
    x = step_of(run, "x")
    assert (x["status"], x["attempt"]) == ("succeeded", 2)
    assert x["attempts"][0]["runner"] == first and "silent" in x["attempts"][0]["reason"]
    assert x["attempts"][1]["runner"] != first


async def test_orchestrator_killed_during_backoff_retries_once_on_time(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=1, HEDDLE_RETRY_BASE="6", HEDDLE_RETRY_CAP="6")
    cmd = counter_command(tmp_path / "count", succeed_at=2)
    run_id = await s.submit({"steps": [{"id": "x", "command": cmd, "retries": 3}]})
    waiting = await s.wait_step(run_id, "x", {"retrying"})
    s.kill("orchestrator", signal.SIGKILL)
    await asyncio.sleep(0.5)
    s.start("orchestrator")
    run = await s.wait_run(run_id, timeout=30)
    x = step_of(run, "x")
    assert (x["status"], x["attempt"]) == ("succeeded", 2)
    assert len(x["attempts"]) == 2 and (tmp_path / "count").read_text().strip() == "2"
    late = (parse(x["attempts"][1]["startedAt"]) - parse(waiting["retryAt"])).total_seconds()
    assert -0.05 <= late <= 0.6, late
