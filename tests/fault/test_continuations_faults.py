"""Continuing a chain when processes die (docs/latency.md, "Continuing a chain"): a
runner SIGKILLed while it runs a continuation, and an orchestrator SIGKILLed while a chain
goes on without it. Real processes; every step leaves a line in a ledger each time it runs,
so the checks are about what ran, not only about what the run document says."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.support.stack import StackFactory, step_of, until


def ledger_chain(ledger: Path, n: int, work: str, retries: int = 0) -> dict:
    """``n`` steps in a line, each one writing its id and attempt to ``ledger``, then ``work``."""
    line = f'echo "$HEDDLE_STEP_ID $HEDDLE_ATTEMPT" >> {ledger}; {work}'
    steps = [
        {
            "id": f"s{i}",
            "command": line,
            "retries": retries,
            **({"dependsOn": [f"s{i - 1}"]} if i else {}),
        }
        for i in range(n)
    ]
    return {"steps": steps}


def continued(s, runners: int) -> list[str]:  # type: ignore[no-untyped-def]
    """The steps the runners started as continuations."""
    return [
        line.split('"step":"')[1].split('"')[0]
        for i in range(runners)
        for line in s.logs(f"runner-{i}").splitlines()
        if '"msg":"continued"' in line
    ]


async def test_a_runner_killed_in_a_continuation_has_it_retried_and_the_run_ends(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    ledger = tmp_path / "ledger"
    run_id = await s.submit(ledger_chain(ledger, 5, "sleep 0.4", retries=1))
    await until(lambda: "s2" in continued(s, 2), 20, "s2 started as a continuation")
    # Once it is known as running (its first heartbeat and its started event are out).
    for _ in range(100):
        if step_of(await s.run(run_id), "s2")["status"] == "running":
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("s2 never showed running")
    [holder] = [i for i in range(2) if '"step":"s2"' in s.logs(f"runner-{i}")]
    s.kill(f"runner-{holder}", signal.SIGKILL, with_group=True)  # as its pod would die
    run = await s.wait_run(run_id, timeout=60)
    assert run["status"] == "succeeded", run
    s2 = step_of(run, "s2")
    assert [a["attempt"] for a in s2["attempts"]] == [1, 2]
    assert "silent" in (s2["attempts"][0]["reason"] or "")
    ran = ledger.read_text().splitlines()
    # Each step once, but s2: its first attempt died with its runner, its retry ran.
    assert sorted(ran) == sorted(["s0 1", "s1 1", "s2 1", "s2 2", "s3 1", "s4 1"])


async def test_a_runner_dead_after_going_on_unheard_never_runs_that_attempt_twice(
    stack: StackFactory, tmp_path: Path
) -> None:
    """The runner starts s1 as the continuation of s0 and dies before s0's outcome is sent,
    its step left running (only the agent dies). With every start made known at once, s1's
    heartbeat is stored before its command starts: the orchestrator spends s1's first
    attempt when s0's is judged silent, and s1 runs again as attempt 2, not as 1."""
    s = await stack(runners=0, HEDDLE_STARTED_REPORT_DELAY="0")
    s.start("runner-doomed", HEDDLE_FAILPOINTS="runner.after_going_on=exit")
    await s.wait_ready(1)
    ledger = tmp_path / "ledger"
    run_id = await s.submit(ledger_chain(ledger, 2, "sleep 0.2", retries=1))
    await until(lambda: not s.procs["runner-doomed"].alive(), 20, "the doomed runner's exit")
    # Its orphan runs on: its command may start a moment after the agent is gone.
    await until(lambda: "s1 1" in ledger.read_text().splitlines(), 10, "the orphan's line")
    s.start("runner-good")
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "succeeded", run
    s1 = step_of(run, "s1")
    assert [(a["attempt"], a["runner"]) for a in s1["attempts"]] == [
        (1, "runner-doomed"),
        (2, "runner-good"),
    ]
    assert "started on runner runner-doomed to follow s0" in s1["attempts"][0]["reason"]
    assert sorted(ledger.read_text().splitlines()) == ["s0 1", "s0 2", "s1 1", "s1 2"]


async def test_an_orchestrator_killed_while_a_chain_goes_on_leaves_every_step_run_once(
    stack: StackFactory, tmp_path: Path
) -> None:
    """Its runner goes on through the chain's continuations while no orchestrator hears of
    them; the orchestrator started again rebuilds the run from what is stored and takes
    the outcomes as they come: nothing runs twice, nothing is lost."""
    s = await stack(runners=2)
    ledger = tmp_path / "ledger"
    run_id = await s.submit(ledger_chain(ledger, 30, "sleep 0.05"))
    await until(lambda: len(continued(s, 2)) >= 3, 20, "a chain going on in continuations")
    s.kill("orchestrator", signal.SIGKILL)
    s.start("orchestrator")
    run = await s.wait_run(run_id, timeout=60)
    assert run["status"] == "succeeded", run
    ran = ledger.read_text().splitlines()
    assert sorted(ran) == sorted(f"s{i} 1" for i in range(30)), ran
    assert all(len(st["attempts"]) == 1 for st in run["steps"])
