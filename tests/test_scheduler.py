"""The cron scheduler: pure slot planning, the scheduler on a driven clock against a real
nats-server, and scheduled runs executing on real runners."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.services.orchestrator.scheduler import Scheduler
from heddle.shared.broker import registry
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.core.cron_plan import keyed_run_id, plan, scheduled_run_id
from heddle.shared.core.validation import Limits, parse_workflow
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import SubmitRun, command_decoder
from heddle.shared.wire.timefmt import parse
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from tests.conftest import StackFactory

T0 = datetime(2024, 1, 1, 0, 0, 30, tzinfo=UTC)
MIN = timedelta(minutes=1)


# ---- pure planning ----------------------------------------------------------------------


def test_plan_every_minute_for_five_minutes() -> None:
    p = plan("* * * * *", None, T0, T0 + 5 * MIN)
    assert [s.minute for s in p.slots] == [1, 2, 3, 4, 5]
    assert p.cursor == p.slots[-1]
    assert plan("* * * * *", None, p.cursor, T0 + 5 * MIN) == type(p)([], None)


def test_plan_backfill_is_limited_and_resumes_at_the_cursor() -> None:
    now, after, got = T0 + 3000 * MIN, T0, []
    for _ in range(3):
        p = plan("* * * * *", None, after, now, limit=1000)
        assert len(p.slots) == 1000
        got += p.slots
        after = p.cursor
    assert got == [T0.replace(second=0) + (i + 1) * MIN for i in range(3000)]
    assert plan("* * * * *", None, after, now, limit=1000).slots == []


def test_plan_without_catchup_runs_only_the_latest_slot() -> None:
    p = plan("*/10 * * * *", None, T0, T0 + 2 * timedelta(hours=1), catchup=False)
    assert p.slots == [datetime(2024, 1, 1, 2, 0, tzinfo=UTC)] and p.cursor == p.slots[0]


def test_plan_skips_slots_that_fell_while_paused() -> None:
    pause = (T0 + 10 * MIN, T0 + 20 * MIN)  # 00:10:30 .. 00:20:30
    p = plan("* * * * *", None, T0, T0 + 25 * MIN, skip=[pause])
    assert [s.minute for s in p.slots] == [*range(1, 11), 21, 22, 23, 24, 25]
    latest = plan("* * * * *", None, T0, T0 + 20 * MIN, catchup=False, skip=[pause])
    assert [s.minute for s in latest.slots] == [10] and latest.cursor.minute == 20
    # A year-long pause is jumped, not walked slot by slot.
    long = (T0, T0 + timedelta(days=365))
    assert plan("* * * * *", None, T0, long[1] + 2 * MIN, skip=[long]).slots[0] > long[1]


def test_plan_in_a_time_zone() -> None:
    p = plan("0 9 * * *", "Europe/Paris", T0, T0 + timedelta(days=2))
    assert [s.astimezone(UTC).hour for s in p.slots] == [8, 8]  # 09:00 CET


def test_derived_run_ids_are_stable_and_safe() -> None:
    slot = datetime(2024, 1, 1, 6, 0, tzinfo=UTC)
    assert scheduled_run_id("etl", slot) == "etl-20240101T0600Z"
    long = scheduled_run_id("x" * 64, slot)
    assert len(long) <= 64 and long == scheduled_run_id("x" * 64, slot)
    assert long != scheduled_run_id("x" * 63 + "y", slot)
    assert keyed_run_id("etl", "k1") == keyed_run_id("etl", "k1") != keyed_run_id("etl", "k2")
    assert all(len(keyed_run_id("w" * 64, k)) <= 64 for k in ("a", "b" * 256))


# ---- the scheduler on a driven clock, against a real nats-server -------------------------


class FakeClock:
    def __init__(self, start: datetime) -> None:
        self.t = start.timestamp()

    def now(self) -> float:
        return self.t

    def of_wall(self, t: float) -> float:
        return t

    def advance(self, delta: timedelta) -> None:
        self.t += delta.total_seconds()


@dataclass
class Env:
    js: JetStreamContext
    workflows: KeyValue
    cron: KeyValue
    clock: FakeClock

    def scheduler(self) -> Scheduler:
        return Scheduler(self.js, self.workflows, self.cron, clock=self.clock, backfill=1000)

    async def register(self, schedule: str = "* * * * *", **extra: Any) -> None:
        doc = {"name": "tick", "schedule": schedule, "steps": [{"id": "a", "command": "true"}]}
        spec = parse_workflow({**doc, **extra}, Limits())
        await registry.register(self.workflows, spec, self.clock.now())

    async def pause(self, paused: bool) -> None:
        await registry.set_paused(self.workflows, "tick", paused, self.clock.now())

    async def submitted(self) -> list[SubmitRun]:
        """Every SubmitRun the schedulers got stored (JetStream dedupes by Nats-Msg-Id)."""
        count = (await self.js.stream_info(names.CMD_STREAM)).state.messages
        sub = await self.js.subscribe(names.CMD_SUBMIT_ALL + ".*", ordered_consumer=True)
        out = [command_decoder.decode((await sub.next_msg(timeout=5)).data) for _ in range(count)]
        await sub.unsubscribe()
        return out

    async def slot_keys(self) -> list[str]:
        entries = await read_current(self.cron, "tick.*")
        return sorted(e.key for e in entries if not e.key.endswith(".cursor"))


@pytest.fixture
async def env(nats_server: EmbeddedNats) -> AsyncIterator[Env]:
    nc = await nats.connect(nats_server.url)
    res = await ensure_resources(nc, Settings.from_env({}, nats_url=nats_server.url))
    yield Env(res.js, res.kv[names.WORKFLOWS_BUCKET], res.kv[names.CRON_BUCKET], FakeClock(T0))
    await nc.close()


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
