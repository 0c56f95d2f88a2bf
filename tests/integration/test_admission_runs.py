"""Runs under way, bounded (HEDDLE_MAX_RUNS_UNDER_WAY), through the real services: the runs
past the bound are stored waiting and answered at once, taken in the order they came, told
as they are admitted, cancelled at once while they wait, and kept waiting across an
orchestrator's SIGKILL."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import datetime
from typing import Any

import pytest
from heddle.shared.core.partitions import partition_of
from heddle.shared.wire.timefmt import parse

from tests.support.metrics import scrape, value
from tests.support.partitions import PARTITIONS, balanced, held
from tests.support.run_events import events
from tests.support.stack import Stack, StackFactory, step_of


def one_step(command: str) -> dict[str, Any]:
    return {"steps": [{"id": "a", "command": command}]}


def spans(runs: list[dict[str, Any]]) -> list[tuple[datetime, datetime]]:
    """Each run from its first step's queueing to its end, by the orchestrator's clock."""
    return [(parse(step_of(r, "a")["queuedAt"]), parse(r["finishedAt"])) for r in runs]


def most_at_once(intervals: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    level = peak = 0
    for _, change in edges:  # an end and a start at the same instant: the end first
        level += change
        peak = max(peak, level)
    return peak


async def submit_all(s: Stack, count: int, command: str) -> list[str]:
    return [await s.submit(one_step(command)) for _ in range(count)]


async def test_runs_past_the_bound_wait_their_turn_in_order_and_are_told_when_admitted(
    stack: StackFactory,
) -> None:
    s = await stack(runners=4, metrics=True, HEDDLE_MAX_RUNS_UNDER_WAY="2")
    run_ids = await submit_all(s, 5, "sleep 0.6")  # every one answered 201, stored
    gauges = await scrape(s, "orchestrator")
    assert (value(gauges, "heddle_live_runs"), value(gauges, "heddle_waiting_runs")) == (5, 3)
    third = await s.run(run_ids[2])
    assert third["waiting"] is True and third["status"] == "running", third
    assert step_of(third, "a")["status"] == "pending"
    told = asyncio.ensure_future(events(s, run_ids[4]))
    runs = [await s.wait_run(r) for r in run_ids]
    assert [r["status"] for r in runs] == ["succeeded"] * 5
    assert not any(r["waiting"] for r in runs)
    assert most_at_once(spans(runs)) == 2, spans(runs)
    queued = [start for start, _ in spans(runs)]
    # In the order they came: the third and fourth when the first two end (together, maybe),
    # the fifth only when one of those ends.
    assert queued[2] <= queued[3] < queued[4], queued
    # One line per state change: stored waiting, then admitted.
    lines = [json.loads(line) for line in s.logs("orchestrator").splitlines() if line[:1] == "{"]
    told_waiting = [x["waiting"] for x in lines if x["msg"] == "run" and x["run"] == run_ids[2]]
    assert told_waiting[:2] == [True, False], told_waiting
    got = await told
    run_events = [data for kind, data in got if kind == "run"]
    assert run_events[0]["waiting"] is True, got
    assert any(not e["waiting"] for e in run_events[1:]), got
    assert got[-1][0] == "end" and got[-1][1]["status"] == "succeeded"


async def test_a_waiting_run_cancelled_ends_at_once_and_never_runs(stack: StackFactory) -> None:
    s = await stack(runners=2, HEDDLE_MAX_RUNS_UNDER_WAY="1")
    busy = await s.submit(one_step("sleep 3"))
    await s.wait_step(busy, "a", {"running"})
    waiting = await s.submit(one_step("echo ran"))
    status, _ = await s.request("POST", f"/api/runs/{waiting}/cancel")
    assert status == 202
    cancelled = await s.wait_run(waiting, timeout=2.0)
    assert cancelled["status"] == "cancelled"
    step = step_of(cancelled, "a")
    assert step["status"] == "cancelled" and step["attempts"] == [] and not step["queuedAt"]
    assert (await s.run(busy))["status"] == "running"  # the cancel did not wait for it
    assert (await s.wait_run(busy))["status"] == "succeeded"


@pytest.mark.fault
async def test_waiting_runs_stay_waiting_across_an_orchestrator_kill_and_then_run_in_order(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2, HEDDLE_MAX_RUNS_UNDER_WAY="1")
    run_ids = await submit_all(s, 3, "sleep 1")
    await s.wait_step(run_ids[0], "a", {"running"})
    s.kill("orchestrator", signal.SIGKILL)
    await asyncio.sleep(0.3)
    for later in run_ids[1:]:
        assert (await s.run(later))["waiting"] is True
    s.start("orchestrator")
    runs = [await s.wait_run(r, timeout=40.0) for r in run_ids]
    assert [r["status"] for r in runs] == ["succeeded"] * 3, runs
    assert most_at_once(spans(runs)) == 1, spans(runs)
    assert spans(runs)[1][0] < spans(runs)[2][0]
    assert [step_of(r, "a")["attempt"] for r in runs] == [1, 1, 1]


@pytest.mark.fault
async def test_a_dead_orchestrators_waiting_runs_are_admitted_in_turn_by_the_one_taking_over(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2, orchestrators=2, HEDDLE_MAX_RUNS_UNDER_WAY="1")
    await balanced(s, ("orchestrator", "orchestrator-1"))
    victims = held(s, "orchestrator")
    ids = [r for r in (f"adm-{i}" for i in range(500)) if partition_of(r, PARTITIONS) in victims]
    run_ids = [await s.submit({"runId": r, **one_step("sleep 1")}) for r in ids[:3]]
    await s.wait_step(run_ids[0], "a", {"running"})
    assert [(await s.run(r))["waiting"] for r in run_ids] == [False, True, True]
    s.kill("orchestrator", signal.SIGKILL)
    runs = [await s.wait_run(r, timeout=40.0) for r in run_ids]
    assert [r["status"] for r in runs] == ["succeeded"] * 3, runs
    assert [step_of(r, "a")["attempt"] for r in runs] == [1, 1, 1]
    assert most_at_once(spans(runs)) == 1, spans(runs)
    assert spans(runs)[1][0] < spans(runs)[2][0]


async def test_waiting_runs_handed_to_an_orchestrator_that_joins_are_admitted_by_its_bound(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2, HEDDLE_MAX_RUNS_UNDER_WAY="1")
    by_partition: dict[int, str] = {}  # one run in every partition: some are sure to move
    for i in range(1000):
        by_partition.setdefault(partition_of(f"join-{i}", PARTITIONS), f"join-{i}")
    assert len(by_partition) == PARTITIONS
    run_ids = [await s.submit({"runId": r, **one_step("sleep 0.4")}) for r in by_partition.values()]
    # Under way, or already done: a 0.4 s step can run between two reads.
    await s.wait_step(run_ids[0], "a", {"running", "succeeded"})
    s.start("orchestrator-1")  # takes half the partitions, and their runs, waiting or not
    await balanced(s, ("orchestrator", "orchestrator-1"))
    assert held(s, "orchestrator-1"), "the orchestrator that joined took no partition"
    runs = [await s.wait_run(r, timeout=60.0) for r in run_ids]
    assert [r["status"] for r in runs] == ["succeeded"] * PARTITIONS, runs
    assert [step_of(r, "a")["attempt"] for r in runs] == [1] * PARTITIONS
    # One under way in each, and one more at most: the run under way that was handed over
    # stays so past the joiner's bound (Admission.recovered) when the joiner took its
    # partition after admitting a run of another; admitting every waiting run would be 7+.
    assert 1 <= most_at_once(spans(runs)) <= 3, spans(runs)
