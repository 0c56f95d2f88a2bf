"""Many faults in one run: a layered DAG keeps running while its services are SIGKILLed and
started again, one after another, a dozen times.

Each kill alone has its own test (test_liveness.py, test_lost_assignments.py); here they
overlap: a restarted orchestrator replays while the dispatcher it talks to was just replaced,
a runner dies while the watchdog's new owner is still catching up. The schedule is random
but seeded, so a failure names the kills that caused it and can be replayed.

Every step leaves one file per process that ran it (``<step>.<attempt>.<pid>``), so the
checks are about what ran, not only what the run document says.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from tests.support.ledger import runs_per_attempt
from tests.support.stack import Stack, StackFactory

LAYERS, WIDTH, KILLS = 5, 40, 12
CHAINS = 3  # the first columns are chains (docs/latency.md, "Continuing a chain")
SERVICES = ["orchestrator", "dispatcher", "gateway"] + [f"runner-{i}" for i in range(4)]


def layered(ran: Path, rng: random.Random) -> dict:
    """LAYERS x WIDTH steps, each depending on two of the layer above (the first CHAINS
    columns on the one above alone), each sleeping 0.1 to 0.4 s: 50 s of sleep on 4 runners
    outlasts the kills (at most 0.7 s apart for a service), and most kills land mid-step.
    Retries cover runners killed under a step."""
    steps = []
    for layer in range(LAYERS):
        for i in range(WIDTH):
            sid = f"l{layer}s{i}"
            pause = rng.choice(["sleep 0.1; ", "sleep 0.2; ", "sleep 0.3; ", "sleep 0.4; "])
            step: dict = {
                "id": sid,
                "command": f"{pause}touch {ran}/{sid}.$HEDDLE_ATTEMPT.$$",
                "retries": 3,
            }
            if layer and i < CHAINS:  # a chain: its steps continue on their runner
                step["dependsOn"] = [f"l{layer - 1}s{i}"]
            elif layer:
                step["dependsOn"] = sorted(
                    {f"l{layer - 1}s{i}", f"l{layer - 1}s{(i * 7 + 3) % WIDTH}"}
                )
            steps.append(step)
    return {"steps": steps}


async def kill_and_restart(s: Stack, victims: list[str], rng: random.Random) -> list[str]:
    """KILLS times: a random victim is SIGKILLed and started again up to 0.3 s later
    (nats-server up to 1 s later, on its store). Returns the schedule, for the failure."""
    schedule: list[str] = []
    t0 = time.monotonic()
    for _ in range(KILLS):
        await asyncio.sleep(rng.uniform(0.1, 0.4))
        victim = rng.choice(victims)
        schedule.append(f"{time.monotonic() - t0:.2f}s {victim}")
        if victim == "nats":
            assert s.nats is not None
            s.nats.kill()
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            s.nats.start()
        else:
            s.kill(victim)
            await asyncio.sleep(rng.uniform(0.0, 0.3))
            s.start(victim)
    deadline = time.monotonic() + 15
    while True:  # the gateway may have been the last one restarted
        try:
            await s.request("GET", "/readyz")
            return schedule
        except OSError:
            assert time.monotonic() < deadline, "gateway did not come back"
            await asyncio.sleep(0.05)


async def chaos_run(s: Stack, tmp_path: Path, victims: list[str], seed: int) -> tuple:
    rng = random.Random(seed)
    ran = tmp_path / "ran"
    ran.mkdir()
    run_id = await s.submit(layered(ran, rng))
    schedule = await kill_and_restart(s, victims, rng)
    under_way = await s.run(run_id)
    assert under_way["status"] == "running", ("the run ended before the last kill", schedule)
    run = await s.wait_run(run_id, timeout=120)
    per_attempt = runs_per_attempt(ran)
    ran_steps = {attempt.split(".")[0] for attempt in per_attempt}
    return run, per_attempt, ran_steps, schedule


@pytest.mark.parametrize(
    ("dispatchers", "seed"), [(1, 11), (2, 13)], ids=["one-dispatcher", "two-dispatchers"]
)
async def test_a_run_survives_a_dozen_service_kills_and_runs_no_attempt_twice(
    stack: StackFactory, tmp_path: Path, dispatchers: int, seed: int
) -> None:
    """Orchestrator, dispatcher, gateway and runners killed in turn: the run succeeds, every
    step ran, and no attempt ran in two processes (a killed runner's step is retried as a
    new attempt, never repeated as the same one). That holds with every start reported at
    once, where an attempt is made known before its command starts; by default a runner
    killed in a step's first moments leaves no trace, and the same attempt is offered
    again (test_attempt_known.py). With two dispatchers, each is killed twice, one of them
    just after the other came back (docs/scaling.md, "Several dispatchers")."""
    s = await stack(runners=4, dispatchers=dispatchers, HEDDLE_STARTED_REPORT_DELAY="0")
    victims = SERVICES + [f"dispatcher-{i}" for i in range(1, dispatchers)]
    run, per_attempt, ran_steps, schedule = await chaos_run(s, tmp_path, victims, seed=seed)
    killed = [k.split()[1] for k in schedule]  # the seed was picked for a schedule with all
    assert {v for v in victims if not v.startswith("runner")} <= set(killed), schedule
    assert len({k for k in killed if k.startswith("runner")}) >= 3, schedule
    failed = [(st["id"], st["status"], st["reason"]) for st in run["steps"]]
    failed = [f for f in failed if f[1] != "succeeded"]
    assert run["status"] == "succeeded", (failed[:5], schedule)
    assert len(ran_steps) == LAYERS * WIDTH, schedule
    twice = {a: n for a, n in per_attempt.items() if n > 1}
    assert twice == {}, (twice, schedule)
    # Each step's attempts in the document are the attempts that ran, and nothing more.
    for st in run["steps"]:
        ran_attempts = {int(a.split(".")[1]) for a in per_attempt if a.split(".")[0] == st["id"]}
        assert st["attempt"] in ran_attempts, (st["id"], st["attempt"], ran_attempts, schedule)


async def test_a_run_survives_kills_of_every_service_and_the_broker(
    stack: StackFactory, tmp_path: Path
) -> None:
    """The same with nats-server among the victims: the run still succeeds and every step
    ran (an attempt may run twice across a broker crash: at least once, as documented)."""
    s = await stack(runners=4, HEDDLE_HEARTBEAT_INTERVAL="0.5")
    run, _per_attempt, ran_steps, schedule = await chaos_run(
        s, tmp_path, [*SERVICES, "nats", "nats"], seed=2
    )
    assert sum(k.endswith(" nats") for k in schedule) >= 2, schedule
    failed = [(st["id"], st["status"], st["reason"]) for st in run["steps"]]
    failed = [f for f in failed if f[1] != "succeeded"]
    assert run["status"] == "succeeded", (failed[:5], schedule)
    assert len(ran_steps) == LAYERS * WIDTH, schedule
