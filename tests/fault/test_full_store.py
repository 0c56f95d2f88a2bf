"""A full store (docs/storage.md), on stacks whose account may store 4 MiB, filled by a
stream of the test's own: Heddle refuses new runs with a 507 naming the store and writes
nothing of them, while the runs under way still have their outcomes recorded; a step's log
lines refused for room are counted in a note where they went missing; a run whose command
found room but whose records did not is not seen until they are stored; and once the filler
is purged, or the limit raised by a reload of nats-server, a submit is taken and runs, with
no Heddle service restarted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from heddle.services.local.embedded_nats import free_port
from nats.js.api import StorageType, StreamConfig
from nats.js.errors import APIError

from tests.support.cli import env_of, heddle
from tests.support.logs import all_lines, texts
from tests.support.metrics import scrape, value
from tests.support.namespaces import records
from tests.support.stack import Stack, StackFactory, eventually

LIMIT = 4 * 1024 * 1024
RESERVE = 512 * 1024
CHECK_INTERVAL = 0.2
FILLER = "TEST_FILLER"
# A stack whose store holds LIMIT bytes, measured often; heartbeats, registry entries and
# leases that outlast the moments the store is wholly full (their renewals are writes too).
SETTINGS = {
    "HEDDLE_STORE_MAX_BYTES": str(LIMIT),
    "HEDDLE_STORE_RESERVE_BYTES": str(RESERVE),
    "HEDDLE_LOG_MAX_BYTES": str(1024 * 1024),
    "HEDDLE_STORE_CHECK_INTERVAL": str(CHECK_INTERVAL),
    "HEDDLE_HEARTBEAT_GRACE": "150",
    "HEDDLE_REGISTRY_TTL": "60",
    "HEDDLE_LEASE_TTL": "60",
}


def waits_for(gate: Path, then: str = "") -> str:
    return f"while [ ! -e {gate} ]; do sleep 0.05; done{'; ' + then if then else ''}"


async def fill(s: Stack, leave: int) -> None:
    """The filler stream written until at most ``leave`` bytes are free, or the store
    refuses (``leave`` 0: every size down to the smallest refused)."""
    nc = await s.connect()
    try:
        js = nc.jetstream()
        filler = StreamConfig(name=FILLER, subjects=["filler.>"], storage=StorageType.FILE)
        await js.add_stream(filler)
        for size in (64 * 1024, 4096, 256, 1):
            while LIMIT - (await js.account_info()).storage > leave + size:
                try:
                    await js.publish("filler.x", b"x" * size)
                except APIError:
                    break  # no room for this size: a smaller one
    finally:
        await nc.close()


async def purge_filler(s: Stack) -> None:
    nc = await s.connect()
    try:
        await nc.jetstream().purge_stream(FILLER)
    finally:
        await nc.close()


async def test_a_full_store_refuses_new_runs_and_keeps_the_runs_under_way(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2, metrics=True, **SETTINGS)
    # A second gateway keeps no reserve: only the server refuses its writes.
    port = free_port()
    s.start("gateway-2", service="gateway", HEDDLE_GATEWAY_PORT=str(port), **NO_RESERVE)
    await wait_answering(s, port)
    pids = {name: proc.pid for name, proc in s.procs.items()}
    gate_a, gate_b1, gate_b2 = (s.tmp / g for g in ("a", "b1", "b2"))
    a = await s.submit(
        {"runId": "under-way-a", "steps": [{"id": "a", "command": waits_for(gate_a)}]}
    )
    b_step = {"id": "b", "command": lines_between(gate_b1, gate_b2)}
    b = await s.submit({"runId": "under-way-b", "steps": [b_step]})
    await s.wait_step(a, "a", {"running"})
    await s.wait_step(b, "b", {"running"})

    # Within the reserve: a new run is refused, naming the store; nothing of it is stored.
    await fill(s, leave=RESERVE // 2)
    await asyncio.sleep(2 * CHECK_INTERVAL)  # the gateway's last reading is out of date
    refused = {"runId": "refused", "steps": [{"id": "x", "command": "true"}]}
    status, body = await s.request("POST", "/api/runs", json=refused)
    assert status == 507 and body["error"].startswith("the store is full"), (status, body)
    status, _ = await s.request("GET", "/api/runs/refused")
    assert status == 404
    assert await records(s, "refused") == (None, [])
    workflow = s.tmp / "wf.json"
    workflow.write_text('{"steps": [{"id": "x", "command": "true"}]}')
    code, _, err = await heddle("submit", str(workflow), env=env_of(s))
    assert code == 4 and "the store is full" in err, (code, err)  # refused (docs/cli.md)

    # The orchestrator shows the store as the server counts it, and the logs given way.
    samples = await scrape(s, "orchestrator")
    assert value(samples, "heddle_store_limit_bytes") == LIMIT
    assert value(samples, "heddle_store_used_bytes") > LIMIT - RESERVE
    assert value(samples, "heddle_stream_bytes", stream=FILLER) > LIMIT / 2
    assert value(samples, "heddle_stream_max_bytes", stream="HEDDLE_LOGS") == 1024 * 1024

    async def logs_purged() -> bool:
        samples = await scrape(s, "orchestrator")
        return value(samples, "heddle_store_logs_purged_total") > 0

    await eventually(logs_purged, "the oldest logs purged for the reserve")

    # The run under way ends, and its outcome is recorded all the same.
    gate_a.touch()
    assert (await s.wait_run(a))["status"] == "succeeded"

    # Wholly full: the gateway without a reserve has its command refused by the server.
    await fill(s, leave=0)
    async with (await s.http()).post(f"http://127.0.0.1:{port}/api/runs", json=refused) as resp:
        body = await resp.json()
        assert resp.status == 507 and "the store is full" in body["error"], (resp.status, body)
    assert await records(s, "refused") == (None, [])

    # The step's twenty lines are refused for room, then the store is freed.
    gate_b1.touch()
    await eventually(lambda: dropped_in(s), "the runner hearing its lines refused")
    await purge_filler(s)
    gate_b2.touch()
    assert (await s.wait_run(b))["status"] == "succeeded"
    log = await all_lines(s, b, "b")
    notes, out = texts(log, "heddle"), texts(log, "stdout")
    # Counted in one note, or in several where the lines came in more than one read and
    # the store had room for a note between them.
    counts = [int(n.split()[0]) for n in notes if n.endswith(" dropped: the store was full")]
    assert sum(counts) == 20, log
    assert "b-after" in out and not any(t.startswith("line-") for t in out), log

    # Room again: a submit is taken and runs, no Heddle service restarted.
    again = await s.submit({"steps": [{"id": "x", "command": "echo again"}]})
    assert (await s.wait_run(again))["status"] == "succeeded"
    assert {name: s.procs[name].pid for name in pids} == pids


NO_RESERVE = {"HEDDLE_STORE_RESERVE_BYTES": "0"}


def lines_between(first: Path, second: Path) -> str:
    """Prints, waits for ``first``; prints twenty long lines (4 KiB: more than a purge of
    the few logs there are frees), waits for ``second``; prints once more."""
    twenty = "for i in $(seq 1 20); do printf 'line-%s-%0200d\\n' $i 0; done"
    return f"echo b-before; {waits_for(first, twenty)}; {waits_for(second, 'echo b-after')}"


async def dropped_in(s: Stack) -> bool:
    return any("dropped: the store is full" in s.logs(n) for n in s.procs if n.startswith("runner"))


async def wait_answering(s: Stack, port: int) -> None:
    async def answers() -> bool:
        try:
            async with (await s.http()).get(f"http://127.0.0.1:{port}/api/runners") as resp:
                return resp.status == 200
        except OSError:
            return False

    await eventually(answers, "the second gateway answering")


async def test_a_limit_raised_by_a_reload_takes_new_runs_again(stack: StackFactory) -> None:
    """The account's limit raised in the server's configuration and reloaded (nats-server
    alone): the services read it from the server and take runs again."""
    s = await stack(runners=1, **SETTINGS)
    pids = {name: proc.pid for name, proc in s.procs.items()}
    await fill(s, leave=0)
    await asyncio.sleep(2 * CHECK_INTERVAL)  # the gateway's last reading is out of date
    doc = {"steps": [{"id": "x", "command": "echo room"}]}
    status, body = await s.request("POST", "/api/runs", json=doc)
    assert status == 507, (status, body)
    assert s.auth is not None and s.nats is not None
    s.auth.users.store_max_bytes = 2 * LIMIT
    s.auth.users.save()
    s.nats.reload()
    taken: list[str] = []

    async def submitted() -> bool:
        status, body = await s.request("POST", "/api/runs", json=doc)
        taken.extend([body["runId"]] if status in (201, 202) else [])
        return bool(taken)

    await eventually(submitted, "a submit taken once the limit is raised")
    assert (await s.wait_run(taken[0]))["status"] == "succeeded"
    assert {name: s.procs[name].pid for name in pids} == pids


async def test_a_run_whose_records_find_no_room_is_not_seen_until_stored(
    stack: StackFactory,
) -> None:
    """A submit's command stored with the last room, its sixty step records finding none:
    no run is seen (no run record, the commit point) until the filler is purged, and then
    the run is stored and runs whole."""
    s = await stack(runners=1, **SETTINGS)
    port = free_port()
    quick = {"HEDDLE_SUBMIT_CONFIRM_TIMEOUT": "0.5", **NO_RESERVE}
    s.start("gateway-2", service="gateway", HEDDLE_GATEWAY_PORT=str(port), **quick)
    await wait_answering(s, port)
    await fill(s, leave=4096)  # room for the command (2 KiB), not for its records (15 KiB)
    await asyncio.sleep(2 * CHECK_INTERVAL)  # the gateway's last reading is out of date
    doc = {"runId": "late", "steps": [{"id": f"s{i}", "command": "true"} for i in range(60)]}
    async with (await s.http()).post(f"http://127.0.0.1:{port}/api/runs", json=doc) as resp:
        assert resp.status == 202, await resp.text()  # the command stored, the run not yet
    status, _ = await s.request("GET", "/api/runs/late")
    assert status == 404
    run, _ = await records(s, "late")
    assert run is None
    await purge_filler(s)
    done = await s.wait_run("late", timeout=60)
    assert done["status"] == "succeeded"
    assert len(done["steps"]) == 60


async def scheduled(s: Stack, name: str) -> set[str]:
    status, body = await s.request("GET", f"/api/workflows/{name}/runs?limit=100")
    assert status == 200, body
    return {r["runId"] for r in body["runs"]}


async def test_cron_slots_wait_for_room_then_run(stack: StackFactory) -> None:
    """A cron slot is a new run: while the store is within its reserve no slot's run is
    made, and once the filler is purged the slots held run, each once."""
    scaled = {"HEDDLE_CRON_TICK": "0.1", "HEDDLE_CRON_TIME_SCALE": "60"}
    s = await stack(runners=1, metrics=True, **scaled, **SETTINGS)
    doc = {"name": "minutely", "schedule": "* * * * *", "steps": [{"id": "a", "command": "true"}]}
    status, body = await s.request("POST", "/api/workflows", json=doc)
    assert status == 201, body
    await eventually(lambda: _some(s), "a first slot run before the store fills")
    assert value(await scrape(s, "orchestrator"), "heddle_cron_held") == 0
    await fill(s, leave=RESERVE // 2)
    await eventually(lambda: _held(s, 1), "the scheduler holding its slots")
    await asyncio.sleep(1)  # a submit of the last tick before the hold, stored
    before = await scheduled(s, "minutely")
    await asyncio.sleep(4)  # four minutes on the scheduler's clock
    assert await scheduled(s, "minutely") == before
    await purge_filler(s)

    async def caught_up() -> bool:
        return len(await scheduled(s, "minutely")) >= len(before) + 4

    await eventually(caught_up, "the slots held run once room frees")
    assert await _held(s, 0)
    for run_id in await scheduled(s, "minutely") - before:
        assert (await s.wait_run(run_id))["status"] == "succeeded"


async def _some(s: Stack) -> bool:
    return bool(await scheduled(s, "minutely"))


async def _held(s: Stack, held: int) -> bool:
    return value(await scrape(s, "orchestrator"), "heddle_cron_held") == held
