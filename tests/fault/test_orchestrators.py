"""Several orchestrators (docs/scaling.md, "Several orchestrators"), as real processes:
three orchestrators share the partitions of the runs, and with two dispatchers beside them,
each of the five is SIGKILLed mid-run in turn (and started again). Every run ends, every
step succeeds on its first attempt, and no attempt runs in two processes (the ledger of
tests/support/ledger.py); a dead orchestrator's partitions are taken over by the others
with the default lease."""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from heddle.shared.core.partitions import partition_of

from tests.support.ledger import LAYERS, RUNNERS, layered, read_ledger
from tests.support.partitions import PARTITIONS, balanced, held
from tests.support.stack import Stack, StackFactory, frozen, until

ORCHESTRATORS = ("orchestrator", "orchestrator-1", "orchestrator-2")


def lines(s: Stack, name: str, msg: str) -> list[dict]:
    out = []
    for line in s.logs(name).splitlines():
        if f'"msg":"{msg}"' in line:
            out.append(json.loads(line))
    return out


def stamp(line: dict) -> float:
    return datetime.fromisoformat(line["ts"].replace("Z", "+00:00")).timestamp()


async def kill_while_running(s: Stack, ledger: Path, victim: str, rng: random.Random) -> float:
    """Three runs (spread over the partitions); ``victim`` SIGKILLed once a quarter of their
    steps started; returns when (wall clock) it was killed, once every run succeeded with
    every step on attempt 1."""
    runs = [await s.submit(layered(ledger, rng, width=5)) for _ in range(3)]

    def started() -> int:
        rows = read_ledger(ledger) if ledger.exists() else []
        return sum(1 for r in rows if r[1] == "start" and r[3].split("/")[0] in runs)

    await until(lambda: started() >= len(runs) * LAYERS * 5 // 4, 30, "runs did not start")
    killed_at = time.time()
    s.kill(victim)
    for run_id in runs:
        run = await s.wait_run(run_id, timeout=60)
        bad = [(st["id"], st["status"], st["attempt"]) for st in run["steps"]]
        bad = [b for b in bad if b[1:] != ("succeeded", 1)]
        assert run["status"] == "succeeded" and not bad, (victim, bad[:5])
    return killed_at


def taken_after(
    s: Stack, victim_held: set[int], killed_at: float, others: tuple[str, ...]
) -> dict[int, float]:
    """When each of the victim's partitions was first taken by another since the kill."""
    taken: dict[int, float] = {}
    for name in others:
        for line in lines(s, name, "partitions taken"):
            t = stamp(line)
            for p in line["partitions"]:
                if p in victim_held and t >= killed_at:
                    taken[p] = min(taken.get(p, t), t)
    return taken


async def takeover(
    s: Stack, victim_held: set[int], killed_at: float, others: tuple[str, ...]
) -> float:
    """Seconds from the kill until the last of the victim's partitions was taken by another
    (the runs may have ended before: theirs were in the partitions taken first)."""
    await until(
        lambda: set(taken_after(s, victim_held, killed_at, others)) == victim_held,
        20,
        f"partitions {victim_held} not all taken over",
    )
    return max(taken_after(s, victim_held, killed_at, others).values()) - killed_at


async def test_three_orchestrators_and_two_dispatchers_each_killed_mid_run(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=0, orchestrators=3, dispatchers=2, wait=False)
    for i in range(RUNNERS):
        s.start(f"runner-{i}", LEDGER_RUNNER=f"runner-{i}")
    await s.wait_ready(RUNNERS)
    await balanced(s, ORCHESTRATORS)
    ledger, rng = tmp_path / "ledger", random.Random(11)
    takeovers = []
    for victim in (*ORCHESTRATORS, "dispatcher", "dispatcher-1"):
        victim_held = held(s, victim) if victim in ORCHESTRATORS else set()
        killed_at = await kill_while_running(s, ledger, victim, rng)
        others = tuple(o for o in ORCHESTRATORS if o != victim)
        if victim in ORCHESTRATORS:
            takeovers.append(await takeover(s, victim_held, killed_at, others))
        s.start(victim)
        await balanced(s, ORCHESTRATORS)
    print(
        f"\ntakeover after SIGKILL: {', '.join(f'{t:.2f}' for t in takeovers)} s "
        f"(p50 {statistics.median(takeovers):.2f}, max {max(takeovers):.2f})"
    )
    assert max(takeovers) < 10, takeovers  # the lease is 3 s: a takeover that never came
    # Every orchestrator took runs of its own: the load was shared.
    for name in ORCHESTRATORS:
        assert lines(s, name, "run stored"), name
    # No attempt ran in two processes.
    pids: dict[str, set[int]] = defaultdict(set)
    for _t, _what, _runner, attempt, pid in read_ledger(ledger):
        pids[attempt].add(pid)
    assert len(pids) == 5 * 3 * (1 + LAYERS * 5)
    assert {a: p for a, p in pids.items() if len(p) > 1} == {}


async def test_an_orchestrator_that_stood_still_past_its_lease_writes_nothing_stale(
    stack: StackFactory, tmp_path: Path
) -> None:
    """One of two orchestrators stops (SIGSTOP, as a paused pod would) with a run's decisions
    made and not yet written, for longer than its lease: the other takes its partitions and
    finishes the runs. Moving again, its writes wait for a renewal (EffectRunner.lease), which
    finds it judged silent: it drops what it held and writes nothing it decided before."""
    s = await stack(
        runners=0, services=("dispatcher", "gateway"), wait=False, HEDDLE_LEASE_TTL="1.5"
    )
    paused = s.start("orchestrator", HEDDLE_FAILPOINTS="orchestrator.before_writes=stop-once")
    s.start("orchestrator-1")
    for i in range(RUNNERS):
        s.start(f"runner-{i}", LEDGER_RUNNER=f"runner-{i}")
    await s.wait_ready(RUNNERS)
    await balanced(s, ORCHESTRATORS[:2])
    ledger, rng = tmp_path / "ledger", random.Random(5)
    runs = [await s.submit(layered(ledger, rng, width=4)) for _ in range(4)]
    mine = held(s, "orchestrator")
    while not any(partition_of(r, PARTITIONS) in mine for r in runs):
        # Run ids are random: all four could land on the other one (1 in 16).
        assert len(runs) < 40, "no run landed on the orchestrator that stops"
        runs.append(await s.submit(layered(ledger, rng, width=4)))
    await until(lambda: frozen(paused.pid), 30, "the failpoint did not stop it")
    await until(lambda: held(s, "orchestrator-1") == set(range(PARTITIONS)), 20, "no takeover")
    thawed_at = time.time()
    os.kill(paused.pid, signal.SIGCONT)
    for run_id in runs:
        run = await s.wait_run(run_id, timeout=60)
        bad = [(st["id"], st["status"], st["attempt"]) for st in run["steps"]]
        assert run["status"] == "succeeded" and all(b[1:] == ("succeeded", 1) for b in bad), bad
    await until(lambda: lines(s, "orchestrator", "partitions lost"), 10, "nothing dropped")
    [lost] = lines(s, "orchestrator", "partitions lost")
    assert lost["to"] == "judged silent"
    assert "its writes wait until this orchestrator's lease is renewed" in s.logs("orchestrator")
    written = [x for x in lines(s, "orchestrator", "step") if thawed_at <= stamp(x) <= stamp(lost)]
    assert written == []
    pids: dict[str, set[int]] = defaultdict(set)
    for _t, _what, _runner, attempt, pid in read_ledger(ledger):
        pids[attempt].add(pid)
    assert len(pids) == len(runs) * (1 + LAYERS * 4)
    assert {a: p for a, p in pids.items() if len(p) > 1} == {}


async def test_a_restarted_orchestrator_learns_a_queued_attempts_runner_from_its_heartbeat(
    stack: StackFactory, tmp_path: Path
) -> None:
    """A runner accepted an attempt (its heartbeat stored) and has not reported it started
    when the orchestrator is SIGKILLed: the one started again learns the runner from the
    replayed heartbeat, so when that runner dies too, the watchdog fails the attempt and a
    new one runs; the same attempt is never queued again as lost (it would run twice)."""
    s = await stack(runners=1, HEDDLE_STARTED_REPORT_DELAY="30")
    marks = tmp_path / "marks"
    command = f'echo "$HEDDLE_ATTEMPT" >> {marks}; sleep 4'
    run_id = await s.submit({"steps": [{"id": "s", "command": command, "retries": 1}]})
    await until(lambda: marks.exists(), 20, "the command did not start")
    s.kill("orchestrator")
    s.start("orchestrator")
    await until(lambda: len(lines(s, "orchestrator", "partitions taken")) >= 2, 20, "no restart")
    s.kill("runner-0", with_group=True)
    s.start("runner-0")
    run = await s.wait_run(run_id, timeout=60)
    assert "lost attempt" not in s.logs("orchestrator")
    assert "watchdog verdict" in s.logs("orchestrator")
    assert marks.read_text().split() == ["1", "2"], marks.read_text()
    assert run["status"] == "succeeded"
