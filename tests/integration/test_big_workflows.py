"""Big workflows: a 5,000-wide fan-out and a 2,000-step chain accepted (their
submit carried beside its command, shared/broker/documents.py), run, and read back in pages through
the API over a real stack; and the paging API's behaviour over a gateway app and a real
nats-server (runs written into heddle-runs as the orchestrator writes them)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from heddle.services.gateway.handlers import run_steps
from heddle.services.gateway.http.keys import RESOURCES
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunRecord, StepRecord, encode

from tests.support.gateway_apps import Gateway, call, root
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway
from tests.support.stack import Stack, StackFactory


def chain(n: int, pad: int = 0) -> list[dict[str, Any]]:
    """``n`` steps one after another; ``pad`` bytes of shell comment make each one bigger."""
    command = "true" + (f" # {'x' * pad}" if pad else "")
    steps: list[dict[str, Any]] = [{"id": "c0", "command": command}]
    steps += [{"id": f"c{i}", "command": command, "dependsOn": [f"c{i - 1}"]} for i in range(1, n)]
    return steps


def fanout(n: int) -> list[dict[str, Any]]:
    middle = [f"f{i}" for i in range(n)]
    return [
        {"id": "root", "command": "true"},
        *({"id": m, "command": "true", "dependsOn": ["root"]} for m in middle),
        {"id": "join", "command": "true", "dependsOn": middle},
    ]


async def wait_summary(s: Stack, run_id: str, timeout: float) -> dict[str, Any]:
    """The run's summary once it ended, read without its steps every 0.5 s (404 until the
    orchestrator stored a run answered 202)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = await s.request("GET", f"/api/runs/{run_id}?steps=none")
        assert status in (200, 404), body
        if status == 200 and body["status"] != "running":
            return body
        assert time.monotonic() < deadline, f"run {run_id} still running: {body}"
        await asyncio.sleep(0.5)


async def all_pages(s: Stack, run_id: str, query: str = "") -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        status, page = await s.request(
            "GET", f"/api/runs/{run_id}/steps?offset={offset}&limit=1000{query}"
        )
        assert status == 200, page
        assert page["offset"] == offset and len(page["steps"]) <= 1000
        steps += page["steps"]
        offset = page["next"]
    return steps


# 20-50 s, sharing the machine with the other test worker: a hang guard, not a bound.
@pytest.mark.timeout(300)
async def test_a_5000_wide_fanout_and_a_2000_step_chain_run_and_read_back_in_pages(
    stack: StackFactory,
) -> None:
    s = await stack(runners=8)
    # The chain's steps padded to carry it beside its command too (over 256 KiB) in 2,000
    # steps: its run, one step at a time, is what the test waits for.
    wide, long = fanout(5000), chain(2000, pad=120)
    assert len(json.dumps({"steps": long})) > 256 * 1024
    # Both carried beside their commands: accepted (202) once the command is stored.
    wide_id = await s.submit({"runId": "wide", "steps": wide}, expect=202)
    long_id = await s.submit({"runId": "long", "steps": long}, expect=202)
    for run_id, steps in ((wide_id, wide), (long_id, long)):
        summary = await wait_summary(s, run_id, timeout=600)
        assert summary["status"] == "succeeded", summary["counts"]
        assert summary["counts"] == {"succeeded": len(steps)}
        assert (summary["stepCount"], summary["stepsIncluded"]) == (len(steps), False)
        assert summary["steps"] == [] and summary["edges"] == []
        read = await all_pages(s, run_id)
        assert [x["id"] for x in read] == [x["id"] for x in steps]
        assert all(x["status"] == "succeeded" and x["exitCode"] == 0 for x in read)
        assert [x["dependsOn"] for x in read] == [x.get("dependsOn", []) for x in steps]
        assert len(await all_pages(s, run_id, "&status=succeeded")) == len(steps)
        assert await all_pages(s, run_id, "&status=failed,skipped") == []
    # Under the document limit the whole document is still there, edges included.
    whole = await s.run(wide_id)
    assert whole["stepsIncluded"] and len(whole["steps"]) == 5002
    assert len(whole["edges"]) == 2 * 5000
    # Both submits were carried beside their commands, and purged once stored.
    nc = await s.connect()
    try:
        js = nc.jetstream()
        assert (await js.stream_info(names.DOCS_STREAM)).state.messages == 0
        cmd = await js.get_last_msg(names.CMD_STREAM, names.CMD_SUBMIT_ALL + ".*")
        assert len(cmd.data) < 1024 and b'"document"' in cmd.data
    finally:
        await nc.close()
    assert "submit refused" not in s.logs("orchestrator")


# ---- the paging API, over a gateway app and runs written to heddle-runs ------------------

STATES = ["succeeded"] * 6 + ["failed", "skipped", "skipped", "running", "queued", "pending"]


async def store_run(gw: Any, run_id: str, states: list[str]) -> None:
    runs = gw.app[RESOURCES].runs
    for i, status in enumerate(states):
        step = StepRecord(
            id=f"s{i:02d}",
            command="true",
            index=i,
            depends_on=[f"s{i - 1:02d}"] if i else [],
            status=status,  # type: ignore[arg-type]
        )
        await runs.put(names.step_key(run_id, step.id), encode(step))
    run = RunRecord(run_id=run_id, status="running", created_at="now", step_count=len(states))
    await runs.put(names.run_key(run_id), encode(run))


async def test_pages_by_offset_limit_and_state(gateway: Gateway, admin_file: Path) -> None:
    gw = await gateway()
    token = root(admin_file)
    await store_run(gw, "paged", STATES)

    async def page(query: str) -> dict[str, Any]:
        status, body = await call(gw, "GET", f"/api/runs/paged/steps{query}", token)
        assert status == 200, body
        return body

    first = await page("?limit=5")
    assert [x["id"] for x in first["steps"]] == ["s00", "s01", "s02", "s03", "s04"]
    assert (first["offset"], first["limit"], first["next"]) == (0, 5, 5)
    assert (first["stepCount"], first["matching"], first["runId"]) == (12, 12, "paged")
    last = await page("?offset=10&limit=5")
    assert [x["id"] for x in last["steps"]] == ["s10", "s11"] and last["next"] is None
    assert (await page("?offset=12"))["steps"] == []
    assert (await page("?offset=99"))["next"] is None
    default = await page("")
    assert (default["limit"], len(default["steps"])) == (100, 12)
    skipped = await page("?status=skipped,failed")
    assert [x["id"] for x in skipped["steps"]] == ["s06", "s07", "s08"]
    assert skipped["matching"] == 3 and skipped["stepCount"] == 12
    live = await page("?status=running&status=queued")  # the first status given counts
    assert [x["id"] for x in live["steps"]] == ["s09"]
    second = await page("?status=succeeded&offset=2&limit=3")
    assert [x["id"] for x in second["steps"]] == ["s02", "s03", "s04"]
    assert (second["matching"], second["next"]) == (6, 5)
    # A live run is read afresh for every page.
    runs = gw.app[RESOURCES].runs
    done = StepRecord(id="s11", command="true", index=11, status="succeeded")
    await runs.put(names.step_key("paged", "s11"), encode(done))
    assert (await page("?status=succeeded"))["matching"] == 7
    status, body = await call(gw, "GET", "/api/runs/nothere/steps", token)
    assert status == 404 and "nothere" in body["error"]


@pytest.mark.parametrize(
    ("query", "paths"),
    [
        ("?offset=-1", ["offset"]),
        ("?offset=x", ["offset"]),
        ("?offset=1.5", ["offset"]),
        ("?limit=0", ["limit"]),
        ("?limit=1001", ["limit"]),
        ("?limit=", ["limit"]),
        ("?status=done", ["status"]),
        ("?status=", ["status"]),
        ("?status=failed,", ["status"]),
        ("?offset=-1&limit=0&status=nope", ["offset", "limit", "status"]),
    ],
)
async def test_bad_page_parameters_are_400(
    gateway: Gateway, admin_file: Path, query: str, paths: list[str]
) -> None:
    gw = await gateway()
    status, body = await call(gw, "GET", f"/api/runs/any/steps{query}", root(admin_file))
    assert status == 400, body
    assert [p["path"] for p in body["problems"]] == paths, body


async def test_the_document_is_whole_up_to_its_limit_and_a_summary_above(
    gateway: Gateway, admin_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = await gateway()
    token = root(admin_file)
    await store_run(gw, "doc", STATES)
    status, whole = await call(gw, "GET", "/api/runs/doc", token)
    assert status == 200 and whole["stepsIncluded"] and len(whole["steps"]) == 12
    assert len(whole["edges"]) == 11 and whole["stepCount"] == 12
    status, summary = await call(gw, "GET", "/api/runs/doc?steps=none", token)
    assert status == 200 and not summary["stepsIncluded"]
    assert (summary["steps"], summary["edges"]) == ([], [])
    assert (
        summary["counts"]
        == whole["counts"]
        == {
            "succeeded": 6,
            "failed": 1,
            "skipped": 2,
            "running": 1,
            "queued": 1,
            "pending": 1,
        }
    )
    assert (await call(gw, "GET", "/workflow/doc", token))[1]["stepsIncluded"]
    monkeypatch.setattr(run_steps, "FULL_DOCUMENT_MAX", 11)  # now the run is too big
    status, body = await call(gw, "GET", "/api/runs/doc", token)
    assert status == 200 and not body["stepsIncluded"] and body["steps"] == []
    status, body = await call(gw, "GET", "/api/runs/doc?steps=all", token)
    assert status == 400 and "/api/runs/doc/steps" in body["error"], body
    status, body = await call(gw, "GET", "/api/runs/doc?steps=some", token)
    assert status == 400 and [p["path"] for p in body["problems"]] == ["steps"]
