"""Semaphores with real services and runners (docs/pools.md, "Semaphores"): a size of 2 is
never exceeded over several runs, a SIGKILLed runner's slot is freed by the watchdog's
verdict, and an orchestrator SIGKILLed while slots are held loses and doubles no count."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

from tests.support.stack import Stack, StackFactory


def marking(ledger: Path, sid: str, seconds: float) -> str:
    """A command that marks its start and end in ``ledger`` (appends, in the order they
    happen), and runs ``seconds`` in between."""
    return f"echo +{sid} >> {ledger}; sleep {seconds}; echo -{sid} >> {ledger}"


def most_at_once(ledger: Path) -> int:
    running = peak = 0
    for line in ledger.read_text().split():
        running += 1 if line.startswith("+") else -1
        peak = max(peak, running)
    return peak


async def semaphore(s: Stack, name: str) -> dict[str, Any]:
    status, body = await s.request("GET", f"/api/semaphores/{name}")
    assert status == 200, body
    return body


async def set_size(s: Stack, name: str, size: int) -> None:
    status, body = await s.request("PUT", f"/api/semaphores/{name}", json={"size": size})
    assert status == 200 and body["size"] == size, body


def steps(ledger: Path, ids: list[str], seconds: float) -> dict[str, Any]:
    return {
        "steps": [
            {"id": i, "command": marking(ledger, i, seconds), "semaphores": ["db"]} for i in ids
        ]
    }


async def test_a_size_of_two_holds_over_three_runs(stack: StackFactory, tmp_path: Path) -> None:
    s = await stack(runners=4)
    await set_size(s, "db", 2)
    ledger = tmp_path / "ledger"
    ledger.touch()
    runs = [
        await s.submit(steps(ledger, [f"{r}{k}" for k in range(n)], 0.3))
        for r, n in (("a", 4), ("b", 3), ("c", 3))
    ]
    for run_id in runs:
        run = await s.wait_run(run_id, timeout=60)
        assert run["status"] == "succeeded", run
    assert len(ledger.read_text().split()) == 20
    assert most_at_once(ledger) == 2  # never more, and the size is used
    after = await semaphore(s, "db")
    assert (after["size"], after["holders"], after["waiting"]) == (2, [], [])


async def test_a_killed_runners_slot_is_freed_by_the_verdict(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)  # db unknown: size 1
    ledger = tmp_path / "ledger"
    ledger.touch()
    first = await s.submit(steps(ledger, ["held"], 60))
    runner = (await s.wait_step(first, "held", {"running"}))["runner"]
    second = await s.submit(steps(ledger, ["next"], 0))
    # Stored (201) once its slot was asked for: it waits behind the one running.
    sem = await semaphore(s, "db")
    assert [(h["runId"], h["stepId"]) for h in sem["holders"]] == [(first, "held")]
    assert [(w["runId"], w["stepId"]) for w in sem["waiting"]] == [(second, "next")]
    assert (await s.run(second))["steps"][0]["status"] == "pending"
    s.kill(runner, with_group=True)
    held = await s.wait_step(first, "held", {"failed"}, timeout=15)
    assert "silent" in held["reason"]
    run = await s.wait_run(second, timeout=15)
    assert run["status"] == "succeeded"
    assert ledger.read_text().split() == ["+held", "+next", "-next"]
    after = await semaphore(s, "db")
    assert (after["holders"], after["waiting"]) == ([], [])


async def test_an_orchestrator_killed_while_slots_are_held(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=3)
    await set_size(s, "db", 2)
    ledger = tmp_path / "ledger"
    ledger.touch()
    runs = [await s.submit(steps(ledger, [f"{r}{k}" for k in range(2)], 2)) for r in "xy"]

    async def running() -> set[tuple[str, str]]:
        found = set()
        for run_id in runs:
            run = await s.run(run_id)
            found |= {(run_id, st["id"]) for st in run["steps"] if st["status"] == "running"}
        return found

    deadline = time.monotonic() + 30
    while len(await running()) < 2:  # two steps running: both slots held
        assert time.monotonic() < deadline, "two steps never ran"
        await asyncio.sleep(0.05)
    s.kill("orchestrator", signal.SIGKILL)
    s.start("orchestrator")
    # Once it has taken the partitions again: the holders are exactly the running steps.
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, "the holders never matched the running steps"
        sem = await semaphore(s, "db")
        holders = {(h["runId"], h["stepId"]) for h in sem["holders"]}
        now = await running()
        if holders == now and len(now) == 2:
            break
        await asyncio.sleep(0.05)
    for run_id in runs:
        run = await s.wait_run(run_id, timeout=60)
        assert run["status"] == "succeeded", run
        assert [st["attempt"] for st in run["steps"]] == [1, 1]
    assert most_at_once(ledger) == 2
    after = await semaphore(s, "db")
    assert (after["holders"], after["waiting"]) == ([], [])
