"""What the web page's workflow views read, against a real stack: the workflow list's next
fire times and recent runs, the history paged back with ``before``, the grid of each run's
step states, and what each busy runner holds since when."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from heddle.services.gateway.reads.finished import FinishedStates

from tests.conftest import StackFactory
from tests.stack import Stack

WORKFLOW = {
    "name": "paged",
    "schedule": "0 6 * * *",
    "timezone": "Europe/Paris",
    "params": [{"name": "fail", "default": "no"}],
    "steps": [
        {"id": "a", "command": "true"},
        {"id": "b", "command": '[ "$HEDDLE_PARAM_FAIL" != yes ]', "dependsOn": ["a"]},
    ],
}


def six_in_paris_after(now: datetime, n: int) -> list[str]:
    """The next ``n`` 06:00 in Paris after ``now``, as the API writes UTC times."""
    paris = ZoneInfo("Europe/Paris")
    day = now.astimezone(paris).date()
    out: list[str] = []
    while len(out) < n:
        at = datetime(day.year, day.month, day.day, 6, tzinfo=paris)
        if at > now:
            out.append(at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"))
        day += timedelta(days=1)
    return out


async def get(s: Stack, path: str) -> Any:
    status, body = await s.request("GET", path)
    assert status == 200, (path, body)
    return body


async def test_next_fires_recent_runs_history_pages_and_grid(stack: StackFactory) -> None:
    s = await stack(runners=2)
    assert (await s.request("POST", "/api/workflows", json=WORKFLOW))[0] == 201
    before = datetime.now(UTC)
    listed = (await get(s, "/api/workflows"))["workflows"][0]
    after = datetime.now(UTC)
    assert listed["nextFires"] in (six_in_paris_after(before, 3), six_in_paris_after(after, 3))
    assert listed["recent"] == [] and listed["lastRun"] is None

    made = []
    for fail in ("no", "yes", "no", "yes", "no"):
        status, body = await s.request(
            "POST", "/api/workflows/paged/runs", json={"params": {"fail": fail}}
        )
        assert status == 201, body
        await s.wait_run(body["runId"])
        made.append(body["runId"])
    newest_first = made[::-1]
    await s.wait_history("paged", 3)

    recent = (await get(s, "/api/workflows"))["workflows"][0]["recent"]
    assert [r["runId"] for r in recent] == newest_first
    # The workflow's own document carries the same recent runs and next fire times, for any
    # version read.
    for query in ("", "?version=1"):
        one = await get(s, "/api/workflows/paged" + query)
        assert one["recent"] == recent, query
        assert one["nextFires"] in (six_in_paris_after(before, 3), six_in_paris_after(after, 3))
    assert [r["status"] for r in recent] == [
        "succeeded",
        "failed",
        "succeeded",
        "failed",
        "succeeded",
    ]

    # Paged back two at a time: every run once, in order, and the last page says so.
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = "?limit=2" + (f"&before={cursor}" if cursor else "")
        page = await get(s, "/api/workflows/paged/runs" + query)
        seen += [r["runId"] for r in page["runs"]]
        pages += 1
        cursor = page["next"]
        if cursor is None:
            break
    assert (seen, pages) == (newest_first, 3)
    assert (await get(s, "/api/workflows/paged/runs"))["next"] is None

    # The grid: the same pages, each run with its steps' states, rows in document order.
    grid = await get(s, "/api/workflows/paged/grid?limit=2")
    assert grid["steps"] == ["a", "b"]
    assert [r["runId"] for r in grid["runs"]] == newest_first[:2]
    assert [r["states"] for r in grid["runs"]] == [
        {"a": "succeeded", "b": "succeeded"},
        {"a": "succeeded", "b": "failed"},
    ]
    older = await get(s, f"/api/workflows/paged/grid?limit=2&before={grid['next']}")
    assert [r["runId"] for r in older["runs"]] == newest_first[2:4]
    again = await get(s, "/api/workflows/paged/grid?limit=2")  # from the gateway's memory
    assert again["runs"] == grid["runs"]

    for bad in ("nope", "2025-01-01T00:00:00.000Z_", "x" * 300):
        for route in ("runs", "grid"):
            status, body = await s.request("GET", f"/api/workflows/paged/{route}?before={bad}")
            assert status == 400, (bad, body)
            assert [p["path"] for p in body["problems"]] == ["before"]
    status, body = await s.request("GET", "/api/workflows/paged/grid?limit=101")
    assert status == 400 and body["problems"][0]["path"] == "limit"
    assert (await s.request("GET", "/api/workflows/nope/grid"))[0] == 404

    # Paused: no fire time to show.
    status, _ = await s.request("PATCH", "/api/workflows/paged", json={"paused": True})
    assert status == 200
    assert (await get(s, "/api/workflows"))["workflows"][0]["nextFires"] == []
    assert (await get(s, "/api/workflows/paged"))["nextFires"] == []


async def test_a_busy_runner_shows_since_when_it_holds_its_step(stack: StackFactory) -> None:
    s = await stack(runners=0)
    s.start("runner-0", POD_NAME="heddle-runner-0", NODE_NAME="node-a")
    await s.wait_ready(1)
    pool = await get(s, "/api/runners")
    idle = pool["runners"][0]
    assert (idle["pod"], idle["node"], idle["heldSince"]) == ("heddle-runner-0", "node-a", None)

    run_id = await s.submit({"steps": [{"id": "long", "command": "sleep 30"}]})
    step = await s.wait_step(run_id, "long", {"running"})
    while (await get(s, "/api/runners"))["runners"][0]["status"] != "busy":
        pass
    busy = (await get(s, "/api/runners"))["runners"][0]
    assert (busy["runId"], busy["stepId"], busy["attempt"]) == (run_id, "long", 1)
    assert busy["heldSince"] == step["startedAt"]
    assert (await s.request("POST", f"/api/runs/{run_id}/cancel"))[0] == 202


def test_finished_states_are_kept_by_steps_least_recently_used_first() -> None:
    kept = FinishedStates(cells=5)
    kept.put(("a", "t1"), {"x": "succeeded", "y": "failed"})
    kept.put(("b", "t1"), {"x": "succeeded", "y": "succeeded"})
    assert kept.get(("a", "t1")) == {"x": "succeeded", "y": "failed"}  # a is now the newest
    kept.put(("c", "t1"), {"x": "skipped", "y": "skipped"})  # 6 steps: b goes
    assert kept.get(("b", "t1")) is None
    assert kept.get(("a", "t1")) is not None and kept.get(("c", "t1")) is not None
    assert kept.get(("a", "t2")) is None  # the same id, created again: another run
    kept.put(("huge", "t1"), {str(i): "succeeded" for i in range(6)})  # more than it holds
    assert kept.get(("huge", "t1")) is None and kept.get(("c", "t1")) is not None
