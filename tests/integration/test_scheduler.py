"""The cron scheduler on a driven clock against a real nats-server, and scheduled runs
executing on real runners. The slots it plans: tests/unit/shared/core/test_cron_plan.py."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta

from heddle.services.orchestrator.scheduler import Scheduler
from heddle.shared.core.cron_plan import scheduled_run_id
from heddle.shared.wire import names
from heddle.shared.wire.timefmt import parse

from tests.support.scheduling import MIN, T0, Env
from tests.support.scheduling import env as env  # the fixture
from tests.support.stack import StackFactory

# ---- the scheduler on a driven clock, against a real nats-server -------------------------


async def test_every_minute_schedule_advanced_five_minutes_runs_five(env: Env) -> None:
    await env.register()
    sched = env.scheduler()
    assert await sched.tick() == 0  # nothing due at registration
    env.clock.advance(5 * MIN)
    assert await sched.tick() == 5
    assert await sched.tick() == 0  # the same minute again: nothing new
    runs = await env.submitted()
    slots = [T0.replace(second=0) + (i + 1) * MIN for i in range(5)]
    assert [r.run_id for r in runs] == [scheduled_run_id("tick", s) for s in slots]
    assert [parse(r.scheduled_for) for r in runs] == slots
    assert {(r.trigger, r.workflow_name, r.version) for r in runs} == {("schedule", "tick", 1)}
    assert runs[0].steps[0].command == "true"
    assert await env.slot_keys() == [f"tick.20240101T00{m:02d}Z" for m in range(1, 6)]


async def test_a_store_within_its_reserve_holds_the_slots_until_room_frees(env: Env) -> None:
    """docs/storage.md: a cron run is a new run, held to the reserve as a submit is."""
    await env.register()
    room = False
    sched = Scheduler(env.js, env.workflows, env.cron, clock=env.clock, room=lambda: room)
    env.clock.advance(3 * MIN)
    assert [await sched.tick() for _ in range(2)] == [0, 0]
    assert await env.submitted() == [] and await env.slot_keys() == []
    room = True
    assert await sched.tick() == 3  # each held slot once, late
    runs = await env.submitted()
    assert [parse(r.scheduled_for) for r in runs] == [
        T0.replace(second=0) + i * MIN for i in (1, 2, 3)
    ]


async def test_scheduled_runs_carry_the_workflow_s_notify_targets(env: Env) -> None:
    """docs/notifications.md: a cron slot's run is notified as any other run of it."""
    await env.register(notify=[{"url": "https://hooks.example.org/heddle", "on": ["failed"]}])
    sched = env.scheduler()
    env.clock.advance(MIN)
    assert await sched.tick() == 1
    [run] = await env.submitted()
    assert [(t.url, t.on, t.secret) for t in run.notify] == [
        ("https://hooks.example.org/heddle", ["failed"], False)
    ]


async def test_two_schedulers_racing_still_create_five(env: Env) -> None:
    await env.register()
    a, b = env.scheduler(), env.scheduler()
    await asyncio.gather(a.tick(), b.tick())
    env.clock.advance(5 * MIN)
    await asyncio.gather(a.tick(), b.tick(), a.tick(), b.tick())
    runs = await env.submitted()
    assert len(runs) == 5 and len({r.run_id for r in runs}) == 5
    assert len(await env.slot_keys()) == 5
    env.clock.advance(MIN)
    await asyncio.gather(a.tick(), b.tick())
    assert len(await env.submitted()) == 6


async def test_downtime_of_3000_slots_backfills_1000_per_tick(env: Env) -> None:
    await env.register()
    sched = env.scheduler()
    await sched.tick()
    env.clock.advance(3000 * MIN)
    assert [await sched.tick() for _ in range(4)] == [1000, 1000, 1000, 0]
    runs = await env.submitted()
    assert len({r.run_id for r in runs}) == 3000
    assert parse(runs[-1].scheduled_for) == T0.replace(second=0) + 3000 * MIN


async def test_catchup_false_runs_only_the_latest_missed_slot(env: Env) -> None:
    await env.register(catchup=False)
    sched = env.scheduler()
    env.clock.advance(90 * MIN)
    assert await sched.tick() == 1
    [run] = await env.submitted()
    assert parse(run.scheduled_for) == T0.replace(second=0) + 90 * MIN


async def test_paused_schedule_runs_nothing_and_does_not_backfill_on_resume(env: Env) -> None:
    await env.register()
    sched = env.scheduler()
    env.clock.advance(2 * MIN)
    assert await sched.tick() == 2
    env.clock.advance(timedelta(seconds=10))
    await env.pause(True)
    env.clock.advance(5 * MIN)
    assert await sched.tick() == 0
    await env.pause(False)
    assert await sched.tick() == 0  # the five slots that fell while paused never run
    env.clock.advance(MIN)
    assert await sched.tick() == 1
    minutes = [parse(r.scheduled_for).minute for r in await env.submitted()]
    assert minutes == [1, 2, 8]


async def test_a_claimed_slot_whose_submit_was_lost_still_runs(env: Env) -> None:
    """A scheduler died between claiming a slot and submitting it: the next tick (here, or
    another scheduler's) finds the claim, and sends the identical, idempotent submit."""
    await env.register()
    env.clock.advance(MIN)
    await env.cron.create(names.cron_slot_key("tick", "20240101T0001Z"), b"{}")
    assert await env.scheduler().tick() == 1
    [run] = await env.submitted()
    assert run.run_id == "tick-20240101T0001Z"


async def test_a_new_version_changes_what_later_slots_run(env: Env) -> None:
    await env.register()
    sched = env.scheduler()
    env.clock.advance(MIN)
    await sched.tick()
    await env.register(steps=[{"id": "b", "command": "echo v2"}])
    env.clock.advance(MIN)
    await sched.tick()
    first, second = await env.submitted()
    assert (first.version, second.version) == (1, 2)
    assert second.steps[0].command == "echo v2"


# ---- end to end: scheduled runs on real runners ------------------------------------------


async def test_scheduled_runs_execute_on_runners(stack: StackFactory) -> None:
    # The orchestrator's scheduler clock runs 60x: an every-minute schedule fires each second.
    s = await stack(runners=2, HEDDLE_CRON_TICK="0.1", HEDDLE_CRON_TIME_SCALE="60")
    doc = {
        "name": "minutely",
        "schedule": "* * * * *",
        "steps": [{"id": "hello", "command": "echo $HEDDLE_RUN_ID"}],
    }
    status, body = await s.request("POST", "/api/workflows", json=doc)
    assert (status, body["version"]) == (201, 1)
    runs, done = await s.wait_history("minutely", 3)
    for entry in done:
        assert entry["trigger"] == "schedule" and entry["version"] == 1
        assert entry["counts"] == {"succeeded": 1}
        slot = parse(entry["scheduledFor"])
        assert slot.second == 0 and entry["runId"] == scheduled_run_id("minutely", slot)
        run = await s.run(entry["runId"])
        step = run["steps"][0]
        assert step["runner"] in ("runner-0", "runner-1")
        assert step["stdoutTail"] == entry["runId"]
    slots = sorted(parse(r["scheduledFor"]) for r in runs)
    assert all(b - a == MIN for a, b in itertools.pairwise(slots))  # none skipped
    status, listing = await s.request("GET", "/api/workflows")
    last = listing["workflows"][0]["lastRun"]  # the newest run (more may have come since)
    assert last["runId"].startswith("minutely-")
    assert last["createdAt"] >= runs[0]["createdAt"]
