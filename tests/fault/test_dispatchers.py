"""Several dispatchers (docs/scaling.md, "Several dispatchers"), as real processes: two
share the ready steps, never give one runner two steps at once, and one SIGKILLed mid-run
leaves no step stuck: the ready steps it held come back to the other once their ack wait ends
(HEDDLE_READY_ACK_WAIT, 2 s in the tests), and one stopped with SIGTERM (a rolling update)
gives them back at once.

Every step appends a start and an end line to one ledger (its runner, run, step, attempt and
pid), so the checks are about what ran, not only what the run documents say.
"""

from __future__ import annotations

import json
import random
import signal
import statistics
import time
from collections import defaultdict
from pathlib import Path

from heddle.services.dispatcher.ready import ack_wait
from heddle.shared.runtime.settings import Settings

from tests.support.ledger import LAYERS, RUNNERS, WIDTH, layered, read_ledger, step_command
from tests.support.stack import FAST, Stack, StackFactory, step_statuses, until


async def kill_mid_run(
    s: Stack, ledger: Path, victim: str, rng: random.Random, sig: int = signal.SIGKILL
) -> tuple[float, dict[str, float]]:
    """Two runs; ``victim`` sent ``sig`` once a quarter of their steps started. Returns the
    seconds from the signal until the last step queued at that moment started, and when
    each step (``run/step``) first started, in seconds after the signal."""
    runs = [await s.submit(layered(ledger, rng)) for _ in range(2)]

    def started() -> int:
        if not ledger.exists():
            return 0
        return sum(1 for r in read_ledger(ledger) if r[1] == "start" and r[3].split("/")[0] in runs)

    try:
        await until(lambda: started() >= len(runs) * LAYERS * WIDTH // 4, 30, "no start")
    except AssertionError:
        # What the runs and the services were doing, for a failure on a loaded machine.
        statuses = [step_statuses(await s.run(r)) for r in runs]
        raise AssertionError(f"runs did not start: {statuses}\n{s.all_logs()}") from None
    killed_at = time.time()
    s.kill(victim, sig)
    queued = set()
    for run_id in runs:
        doc = await s.run(run_id)
        queued |= {f"{run_id}/{st['id']}" for st in doc["steps"] if st["status"] == "queued"}
    assert queued, "nothing was queued at the kill"
    for run_id in runs:
        run = await s.wait_run(run_id, timeout=60)
        bad = [(st["id"], st["status"], st["attempt"]) for st in run["steps"]]
        bad = [b for b in bad if b[1:] != ("succeeded", 1)]
        assert run["status"] == "succeeded" and not bad, (victim, bad[:5])
    first_start: dict[str, float] = {}
    for t, what, _runner, attempt, _pid in read_ledger(ledger):
        step = attempt.rsplit(".", 1)[0]
        if what == "start" and step.split("/")[0] in runs:
            first_start[step] = min(t - killed_at, first_start.get(step, t - killed_at))
    assert queued <= set(first_start)
    return max(first_start[q] for q in queued), first_start


async def two_dispatchers(stack: StackFactory, **settings: str) -> Stack:
    """Two dispatchers and RUNNERS runners, each runner's steps told its name."""
    s = await stack(runners=0, dispatchers=2, wait=False, **settings)
    for i in range(RUNNERS):
        s.start(f"runner-{i}", LEDGER_RUNNER=f"runner-{i}")
    await s.wait_ready(RUNNERS)
    return s


async def restart(s: Stack, victim: str) -> None:
    started = s.logs(victim).count('"msg":"dispatching"')
    assert started
    s.start(victim)
    await until(
        lambda: s.logs(victim).count('"msg":"dispatching"') > started,
        30,
        f"{victim} did not start again",
    )


async def test_a_stopped_dispatcher_gives_back_the_steps_it_held_at_once(
    stack: StackFactory, tmp_path: Path
) -> None:
    """SIGTERM, as a rolling update stops a pod: the ready steps waiting in its hand go back
    to the stream at once (a nak), rather than after their ack wait, and the other one
    starts them. Then the same for the other dispatcher. The ack wait is long here: a step
    in hand is touched every third of it, so one not given back would start no sooner than
    two thirds of it after the signal, while one given back waits only for a free runner
    (seconds, on a loaded machine)."""
    slow = {"HEDDLE_READY_ACK_WAIT": "12"}
    s = await two_dispatchers(stack, **slow)
    ledger, rng = tmp_path / "ledger", random.Random(3)
    recovery = []
    for victim in ("dispatcher", "dispatcher-1"):
        lines = len(s.logs(victim).splitlines())
        _, first_start = await kill_mid_run(s, ledger, victim, rng, signal.SIGTERM)
        log = [json.loads(x) for x in s.logs(victim).splitlines()[lines:]]
        assert log[-1]["msg"] == "stopped", log[-1]
        back = [f"{x['run']}/{x['step']}" for x in log if x["msg"] == "given back"]
        recovery += [first_start[b] for b in back]
        await restart(s, victim)
    shown = ", ".join(f"{r:.2f}" for r in recovery)
    print(f"\nSIGTERM -> each step given back starts: {shown} s")
    assert recovery, "neither dispatcher held a step when stopped"
    assert max(recovery) < ack_wait(Settings.from_env({**FAST, **slow})) * 2 / 3, recovery


async def test_two_dispatchers_share_the_pool_and_one_killed_leaves_no_step_stuck(
    stack: StackFactory, tmp_path: Path
) -> None:
    """Three trials: dispatcher SIGKILLed mid-run, started again once the runs ended; then
    dispatcher-1; then dispatcher again. Every run succeeds, every step on its first
    attempt and in one process, and no runner ever runs two steps at once."""
    s = await two_dispatchers(stack)
    ledger, rng = tmp_path / "ledger", random.Random(7)
    recovery = []
    for victim in ("dispatcher", "dispatcher-1", "dispatcher"):
        recovery.append((await kill_mid_run(s, ledger, victim, rng))[0])
        await restart(s, victim)
    print(
        f"\nkill -> last step queued at the kill started: {', '.join(f'{r:.2f}' for r in recovery)}"
        f" s (p50 {statistics.median(recovery):.2f}, max {max(recovery):.2f})"
    )
    # Both dispatchers gave out steps, each under its own name.
    for name in ("dispatcher", "dispatcher-1"):
        assert f'"dispatcher":"{name}"' in s.logs(name), name
        assert s.logs(name).count('"msg":"assigned"') > 10, name
    rows = read_ledger(ledger)
    # No attempt ran in two processes.
    pids: dict[str, set[int]] = defaultdict(set)
    for _t, _what, _runner, attempt, pid in rows:
        pids[attempt].add(pid)
    assert len(pids) == 3 * 2 * (1 + LAYERS * WIDTH)
    assert {a: p for a, p in pids.items() if len(p) > 1} == {}
    # No runner ran two steps at once: on each, starts and ends alternate.
    per_runner: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    for t, what, runner, attempt, _pid in rows:
        per_runner[runner].append((t, what, attempt))
    assert set(per_runner) == {f"runner-{i}" for i in range(RUNNERS)}
    for runner, marks in per_runner.items():
        marks.sort(key=lambda m: (m[0], m[1] == "start"))
        running = None
        for t, what, attempt in marks:
            if what == "start":
                assert running is None, (runner, running, attempt, t)
                running = attempt
            else:
                assert running == attempt, (runner, running, attempt, t)
                running = None


async def test_a_step_waiting_in_hand_while_the_pool_turns_over_is_not_redelivered(
    stack: StackFactory, tmp_path: Path
) -> None:
    """One runner, two dispatchers, a fan-out of short steps: each dispatcher holds ready
    steps for several ack waits while the runner frees up every few tens of milliseconds
    for other steps. A live dispatcher touches what it holds however often it is woken, so
    nothing is redelivered to the other one, and no attempt runs twice."""
    # An ack wait of 1 s: the six or seven steps in each hand wait 1.5 s or more at 0.1 s a
    # step on one runner, though the runner frees up every 0.1 s.
    quick = {"HEDDLE_READY_ACK_WAIT": "1", "HEDDLE_ASSIGN_TIMEOUT": "0.5"}
    s = await stack(runners=0, dispatchers=2, wait=False, **quick)
    assert ack_wait(Settings.from_env({**FAST, **quick})) == 1.0
    s.start("runner-0", LEDGER_RUNNER="runner-0")
    await s.wait_ready(1)
    ledger = tmp_path / "ledger"
    width = 30
    steps: list[dict] = [{"id": "root", "command": "true"}]
    steps += [
        {"id": f"f{i}", "command": step_command(ledger, "0.1"), "dependsOn": ["root"]}
        for i in range(width)
    ]
    run = await s.wait_run(await s.submit({"steps": steps}), timeout=90)
    assert run["status"] == "succeeded"
    assert {st["attempt"] for st in run["steps"]} == {1}
    starts: dict[str, int] = defaultdict(int)
    for _t, what, _runner, attempt, _pid in read_ledger(ledger):
        starts[attempt] += what == "start"
    assert len(starts) == width
    assert {a: n for a, n in starts.items() if n > 1} == {}
    for name in ("dispatcher", "dispatcher-1"):
        assert '"msg":"already taken"' not in s.logs(name), name
