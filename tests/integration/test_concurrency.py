"""Concurrency limits with real services and runners (docs/pools.md, "Concurrency limits"):
five runs of one key of limit 1 triggered together never overlap and start in the order
they were queued, each queued run saying what it waits for; ``cancelRunning`` cancels the
holder and starts the new run; ``refuse`` answers 409 naming the holder; a cron slot's run
takes the key evaluated with the defaults; every problem of a ``concurrency`` is listed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from heddle.shared.core.concurrency import document_name
from heddle.shared.wire import names
from heddle.shared.wire.contracts import concurrency_key_decoder

from tests.fault.test_semaphores import marking, most_at_once
from tests.support.scheduling import MIN, Env
from tests.support.scheduling import env as env  # the fixture
from tests.support.stack import Stack, StackFactory


def deploy(ledger: Path, seconds: float, on_limit: str = "queue") -> dict[str, Any]:
    """A workflow whose runs of one ``env`` share a key of limit 1; each run's step marks
    its ``tag`` in ``ledger``."""
    return {
        "name": "deploy",
        "params": [{"name": "env", "default": "prod"}, {"name": "tag", "default": "-"}],
        "concurrency": {"key": "workflow + '/' + params.env", "onLimit": on_limit},
        "steps": [{"id": "go", "command": marking(ledger, "$HEDDLE_PARAM_TAG", seconds)}],
    }


async def trigger(s: Stack, tag: str, env: str = "prod") -> tuple[int, Any]:
    return await s.request(
        "POST", "/api/workflows/deploy/runs", json={"params": {"tag": tag, "env": env}}
    )


async def key_document(s: Stack, key: str) -> Any:
    nc = await s.connect()
    try:
        kv = await nc.jetstream().key_value(names.CONCURRENCY_BUCKET)
        entry = await kv.get(document_name(key))
        assert entry.value is not None
        return concurrency_key_decoder.decode(entry.value)
    finally:
        await nc.close()


async def test_five_runs_of_a_key_of_limit_one(stack: StackFactory, tmp_path: Path) -> None:
    s = await stack(runners=3)
    ledger = tmp_path / "ledger"
    ledger.touch()
    assert (await s.request("POST", "/api/workflows", json=deploy(ledger, 0.4)))[0] == 201
    tags = [f"r{i}" for i in range(5)]
    answers = await asyncio.gather(*(trigger(s, tag) for tag in tags))
    assert [status for status, _ in answers] == [201] * 5, answers
    run_of = {body["runId"]: tag for tag, (_, body) in zip(tags, answers, strict=True)}
    # Each answered once its run took the key or queued for it: the order they start in.
    doc = await key_document(s, "deploy/prod")
    assert doc.key == "deploy/prod" and doc.limit == 1 and len(doc.holders) == 1
    order = [*doc.holders, *doc.queue]
    assert sorted(order) == sorted(run_of)
    last = await s.run(order[-1])
    assert last["waiting"] is True and {st["status"] for st in last["steps"]} == {"pending"}
    assert (last["concurrencyKey"], last["concurrencyLimit"]) == ("deploy/prod", 1)
    why = last["waitingFor"]
    assert (why["reason"], why["key"]) == ("concurrency", "deploy/prod"), why
    assert why["heldBy"] in order[:-1], why
    other = await trigger(s, "elsewhere", env="test")  # another key: not held back
    assert other[0] == 201
    runs = [await s.wait_run(run_id, timeout=30) for run_id in order]
    assert [r["status"] for r in runs] == ["succeeded"] * 5, runs
    await s.wait_run(other[1]["runId"])
    marks = [m for m in ledger.read_text().split() if "elsewhere" not in m]
    assert marks == [f"{sign}{run_of[r]}" for r in order for sign in "+-"]
    assert most_at_once(ledger) <= 2  # the other key's run beside them, no more
    after = await key_document(s, "deploy/prod")
    assert (after.holders, after.queue) == ([], [])


async def test_cancel_running_and_refuse(stack: StackFactory, tmp_path: Path) -> None:
    s = await stack(runners=2)
    ledger = tmp_path / "ledger"
    ledger.touch()
    assert (await s.request("POST", "/api/workflows", json=deploy(ledger, 60, "cancelRunning")))[
        0
    ] == 201
    status, first = await trigger(s, "old")
    assert status == 201, first
    await s.wait_step(first["runId"], "go", {"running"})
    # A run of the same workflow with a 1 s step: it cancels the holder, then runs.
    doc = deploy(ledger, 0, "cancelRunning")
    assert (await s.request("POST", "/api/workflows", json=doc))[0] == 201
    status, second = await trigger(s, "new")
    assert status == 201, second
    old = await s.wait_run(first["runId"], timeout=15)
    assert old["status"] == "cancelled", old
    assert old["reason"] == (
        f"cancelled for run {second['runId']}: concurrency key deploy/prod (onLimit cancelRunning)"
    )
    new = await s.wait_run(second["runId"], timeout=15)
    assert new["status"] == "succeeded", new
    assert ledger.read_text().split() == ["+old", "+new", "-new"]

    refusing = deploy(ledger, 60, "refuse")
    assert (await s.request("POST", "/api/workflows", json=refusing))[0] == 201
    status, holder = await trigger(s, "holder")
    assert status == 201, holder
    status, body = await trigger(s, "refused")
    assert status == 409, body
    assert (body["key"], body["heldBy"]) == ("deploy/prod", holder["runId"]), body
    assert holder["runId"] in body["error"]
    status, body = await trigger(s, "free", env="test")  # another key: free
    assert status == 201, body
    status, _ = await s.request("POST", f"/api/runs/{holder['runId']}/cancel")
    assert status == 202
    assert (await s.wait_run(holder["runId"]))["status"] == "cancelled"
    # The key is free again. Two at once may both pass the gateway's look: then the
    # orchestrator fails the one that came second, at once, naming the other.
    both = await asyncio.gather(trigger(s, "one"), trigger(s, "two"))
    made = [body["runId"] for status, body in both if status == 201]
    assert [status for status, _ in both].count(409) == 2 - len(made), both
    steps = {r: (await s.wait_step(r, "go", {"running", "cancelled"}))["status"] for r in made}
    winners = [r for r, status in steps.items() if status == "running"]
    assert len(winners) == 1, steps  # the winner's step runs, the loser's is cancelled
    for run_id in set(made) - set(winners):
        lost = await s.wait_run(run_id)
        assert lost["status"] == "failed", lost
        assert lost["reason"] == f"refused: concurrency key deploy/prod held by run {winners[0]}"


async def test_every_problem_of_a_concurrency_is_listed(stack: StackFactory) -> None:
    s = await stack(runners=1)
    doc = {
        "steps": [{"id": "a", "command": "true"}],
        "concurrency": {"key": "params.env +", "limit": 0, "onLimit": "wait", "size": 2},
    }
    status, body = await s.request("POST", "/api/runs", json=doc)
    assert status == 400, body
    assert sorted(p["path"] for p in body["problems"]) == [
        "concurrency.key",
        "concurrency.limit",
        "concurrency.onLimit",
        "concurrency.size",
    ]
    doc = {"steps": [{"id": "a", "command": "true"}], "concurrency": {"key": "params.env"}}
    status, body = await s.request("POST", "/api/runs", json=doc)  # no env given
    assert status == 400 and [p["path"] for p in body["problems"]] == ["concurrency.key"], body
    scheduled = {
        "name": "nightly",
        "schedule": "0 3 * * *",
        "params": [{"name": "env", "default": "prod"}],
        "concurrency": {"key": "params.region"},  # no such parameter, no default
        "steps": [{"id": "a", "command": "true"}],
    }
    status, body = await s.request("POST", "/api/workflows", json=scheduled)
    assert status == 400 and [p["path"] for p in body["problems"]] == ["concurrency.key"], body


async def test_a_scheduled_run_takes_its_key_evaluated_with_the_defaults(env: Env) -> None:
    await env.register(
        params=[{"name": "env", "default": "prod"}],
        concurrency={"key": "workflow + '/' + params.env", "limit": 2, "onLimit": "refuse"},
    )
    sched = env.scheduler()
    env.clock.advance(2 * MIN)
    assert await sched.tick() == 2
    found = [(r.concurrency_key, r.concurrency_limit, r.on_limit) for r in await env.submitted()]
    assert found == [("tick/prod", 2, "refuse")] * 2
