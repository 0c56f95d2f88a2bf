"""When an attempt is made known by a heartbeat (docs/latency.md, "Making an attempt
known"): a short step writes none, its answer travelling with its outcome; a longer one
writes its first before its answer; with every start reported at once, before its command
starts. What that means when a runner dies under a step is tested here with real runner
processes killed with their process group, as a pod dies.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats
import pytest
from heddle.shared.core.partitions import partition_of
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

from bench.procfs import group_members
from tests.support.offers import assign, one_runner
from tests.support.stack import Stack, StackFactory, step_of


async def heartbeats_stored(s: Stack) -> int:
    async with await s.connect() as nc:
        info = await nc.jetstream().stream_info(f"KV_{names.HEARTBEATS_BUCKET}")
    return info.state.last_seq


async def test_short_steps_write_no_heartbeat_and_a_longer_one_does(
    stack: StackFactory,
) -> None:
    # "Short" is under the report delay, 1 s here so that a slow spawn on a busy machine
    # stays short; the dispatcher's long wait keeps the answer from leaving early.
    s = await stack(
        runners=2,
        HEDDLE_HEARTBEAT_INTERVAL="5",
        HEDDLE_STARTED_REPORT_DELAY="1",
        HEDDLE_ASSIGN_TIMEOUT="20",
    )
    run_id = await s.submit({"steps": [{"id": f"s{i}", "command": "true"} for i in range(20)]})
    assert (await s.wait_run(run_id))["status"] == "succeeded"
    assert await heartbeats_stored(s) == 0
    run_id = await s.submit({"steps": [{"id": "long", "command": "sleep 1.3"}]})
    run = await s.wait_run(run_id)
    assert run["status"] == "succeeded"
    # The first, written as the step was announced: the interval (5 s) never came.
    assert await heartbeats_stored(s) == 1
    assert step_of(run, "long")["lastHeartbeatAt"]


async def wait_lines(path: Path, n: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() or len(path.read_text().splitlines()) < n:
        assert time.monotonic() < deadline, f"{path} never had {n} lines"
        await asyncio.sleep(0.02)


async def die_under_the_step(s: Stack, ran: Path, retries: int) -> dict:
    """runner-0 starts the step and dies with its command before answering; runner-1
    joins. Returns the finished run."""
    s.start("runner-0")
    await s.wait_ready(1)
    run_id = await s.submit(
        {
            "steps": [
                {
                    "id": "work",
                    "command": f"echo $HEDDLE_ATTEMPT >> {ran}; sleep 2",
                    "retries": retries,
                }
            ]
        }
    )
    await wait_lines(ran, 1)
    s.kill("runner-0", with_group=True)
    s.start("runner-1")
    return await s.wait_run(run_id, timeout=20)


async def test_a_runner_dying_before_it_answered_leaves_the_same_attempt_to_another(
    stack: StackFactory, tmp_path: Path
) -> None:
    """No heartbeat and no answer: nothing shows that the attempt ran, so the dispatcher,
    once it stops waiting for the answer, offers it again. The step succeeds on its first
    attempt, with no retry spent and no silence to wait for."""
    s = await stack(runners=0, HEDDLE_STARTED_REPORT_DELAY="5", HEDDLE_ASSIGN_TIMEOUT="4")
    ran = tmp_path / "ran"
    run = await die_under_the_step(s, ran, retries=0)
    work = step_of(run, "work")
    assert (run["status"], work["attempt"], work["runner"]) == ("succeeded", 1, "runner-1")
    assert len(work["attempts"]) == 1
    assert ran.read_text() == "1\n1\n"
    assert '"msg":"runner did not answer"' in s.logs("dispatcher")


@pytest.mark.parametrize(("report_delay", "seen"), [("0", True), ("5", False)])
async def test_only_with_every_start_reported_at_once_is_an_attempt_known_before_it_starts(
    stack: StackFactory, tmp_path: Path, report_delay: str, seen: bool
) -> None:
    """HEDDLE_STARTED_REPORT_DELAY=0: the heartbeat is stored before the command starts,
    so a runner that dies at any moment leaves a trace, and a retry is always a new
    attempt (test_chaos.py relies on it). Otherwise the command starts at once (the
    dispatcher's wait and the heartbeat interval are long here, so neither an early
    answer nor the interval brings a heartbeat first). The command holds no NATS
    credentials, so it marks its start and waits while the test looks."""
    s = await stack(
        runners=1,
        HEDDLE_STARTED_REPORT_DELAY=report_delay,
        HEDDLE_ASSIGN_TIMEOUT="20",
        HEDDLE_HEARTBEAT_INTERVAL="5",
    )
    started, go = tmp_path / "started", tmp_path / "go"
    command = f"touch {started}; while [ ! -e {go} ]; do sleep 0.02; done"
    run_id = await s.submit({"steps": [{"id": "work", "command": command}]})
    deadline = time.monotonic() + 20
    while not started.exists():
        assert time.monotonic() < deadline, "the command did not start"
        await asyncio.sleep(0.01)
    async with await s.connect() as nc:
        kv = await nc.jetstream().key_value(names.HEARTBEATS_BUCKET)
        # As the bucket stores it: the run's partition appended.
        key = names.heartbeat_key(run_id, "work", "runner-0")
        key += f".{partition_of(run_id, Settings().partitions)}"
        try:
            known = (await kv.get(key)).value is not None
        except nats.js.errors.KeyNotFoundError:
            known = False
    go.touch()
    run = await s.wait_run(run_id)
    assert (run["status"], known) == ("succeeded", seen), step_of(run, "work")


@pytest.mark.parametrize(("report_delay", "accepted"), [("0", False), ("5", True)])
async def test_a_runner_that_cannot_store_a_heartbeat_refuses_only_when_starts_are_reported_at_once(
    stack: StackFactory, tmp_path: Path, report_delay: str, accepted: bool
) -> None:
    """With the heartbeats bucket gone: every start reported at once, the attempt cannot be
    made known first, so it is refused and its command never runs; otherwise a short step
    needs no heartbeat and runs."""
    nc = await one_runner(stack, report_delay=report_delay, assign_timeout="20")
    await nc.jetstream().delete_stream(f"KV_{names.HEARTBEATS_BUCKET}")
    ran = tmp_path / "ran"
    answer, _events = await assign(nc, "s", f"touch {ran}")
    await asyncio.sleep(0.3)
    assert (answer, ran.exists()) == (accepted, accepted)
    await nc.close()


async def test_a_step_cancelled_before_its_runner_is_known_is_killed_when_it_reports(
    stack: StackFactory, tmp_path: Path
) -> None:
    """The run is cancelled while its step's runner is still unknown (no heartbeat, no
    report yet): the run ends at once, and the command, announced at the report delay, is
    told to die then, instead of running on for its whole length."""
    s = await stack(runners=1, HEDDLE_STARTED_REPORT_DELAY="1", HEDDLE_ASSIGN_TIMEOUT="20")
    pid_file = tmp_path / "pid"
    run_id = await s.submit(
        {"steps": [{"id": "long", "command": f"echo $$ > {pid_file}; exec sleep 60"}]}
    )
    await wait_lines(pid_file, 1)
    pid = int(pid_file.read_text())
    status, _ = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert status == 202
    run = await s.wait_run(run_id, timeout=5)
    assert (run["status"], step_of(run, "long")["runner"]) == ("cancelled", None)
    deadline = time.monotonic() + 10
    while group_members(pid):
        assert time.monotonic() < deadline, "the cancelled step's command still runs"
        await asyncio.sleep(0.1)
    assert "attempt does not count: run is already cancelled" in s.logs("orchestrator")
