"""A rolling upgrade from the last release to this checkout, with runs in flight
(docs/upgrading.md): a stack of the release's code (its own virtualenv, from a worktree of its
tag) runs chains, fan-outs, a retry and a schedule; each service is then replaced, one at a
time, by this checkout's, in the order the chart's rolling update gives (orchestrator,
dispatcher, gateway, then each runner, draining its step first). Every run ends succeeded, no
attempt runs twice, no cron slot is missed or doubled. Minutes, a git worktree and the
history back to the release: `make test-upgrade` runs it, not `make test`."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.ledger import read_ledger, step_command
from tests.support.stack import Stack, StackFactory
from tests.upgrade.release import Release, install, last_release

RUNNERS = ("runner-0", "runner-1", "runner-2")
SERVICES = ("orchestrator", "dispatcher", "gateway")  # the chart's order, runners last


@pytest.fixture
async def release(tmp_path: Path) -> AsyncIterator[Release]:
    installed = install(last_release(), tmp_path / "release")
    yield installed
    installed.remove()


def chain(ledger: Path, n: int) -> dict[str, object]:
    steps = [{"id": f"c{i}", "command": step_command(ledger, "0.3")} for i in range(n)]
    for i in range(1, n):
        steps[i]["dependsOn"] = [f"c{i - 1}"]
    return {"steps": steps}


def fanout(ledger: Path, width: int) -> dict[str, object]:
    leaves = [
        {"id": f"f{i}", "command": step_command(ledger, "0.2"), "dependsOn": ["root"]}
        for i in range(width)
    ]
    return {"steps": [{"id": "root", "command": step_command(ledger, "0.1")}, *leaves]}


def retried(ledger: Path, flag: Path) -> dict[str, object]:
    """Its step fails its first attempt on purpose and succeeds on its second."""
    first = f"[ -e {flag} ] || {{ touch {flag}; exit 3; }}"
    return {
        "steps": [
            {"id": "flaky", "retries": 2, "command": f"{first}; {step_command(ledger, '0.1')}"}
        ]
    }


async def start_release(stack: StackFactory, release: Release) -> Stack:
    s = await stack(runners=0, services=(), wait=False)
    for name in (*SERVICES, *RUNNERS):
        s.start(name, python=release.python, LEDGER_RUNNER=name)
    await s.wait_ready(len(RUNNERS))
    return s


async def replace(s: Stack, name: str) -> None:
    """The old process stopped as the chart's rolling update stops it (SIGTERM: a runner
    drains its step), then this checkout's started in its place."""
    await asyncio.to_thread(s.kill, name, signal.SIGTERM)
    s.start(name, LEDGER_RUNNER=name)
    await asyncio.sleep(1.0)  # runs go on under both versions a while


def slots_between(start: datetime, end: datetime) -> list[datetime]:
    """Every minute boundary in (start, end]: the slots of a schedule of every minute."""
    t = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    found = []
    while t <= end:
        found.append(t)
        t += timedelta(minutes=1)
    return found


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_a_rolling_upgrade_with_runs_in_flight_loses_and_repeats_nothing(
    stack: StackFactory, release: Release, tmp_path: Path
) -> None:
    ledger, flag = tmp_path / "ledger", tmp_path / "flag"
    s = await start_release(stack, release)
    registered_at = datetime.now(UTC)
    tick = {"name": "tick", "schedule": "* * * * *", "steps": [{"id": "t", "command": "true"}]}
    status, body = await s.request("POST", "/api/workflows", json=tick)
    assert status in (200, 201), body
    runs = [await s.submit(chain(ledger, 6)), await s.submit(fanout(ledger, 12))]
    runs.append(await s.submit(retried(ledger, flag)))
    for name in (*SERVICES, *RUNNERS):
        runs.append(await s.submit(chain(ledger, 3) if len(runs) % 2 else fanout(ledger, 6)))
        await replace(s, name)
    runs.append(await s.submit(chain(ledger, 4)))
    ended = [await s.wait_run(r, timeout=60) for r in runs]
    assert [r["status"] for r in ended] == ["succeeded"] * len(runs), ended
    # Past the next minute boundary after the upgrade, so a slot fell under the new code.
    upgraded_at = datetime.now(UTC)
    await asyncio.sleep(60 - upgraded_at.second + 5)
    _, body = await s.request("GET", "/api/workflows/tick/runs?limit=100")
    scheduled = Counter(instant(r["scheduledFor"]) for r in body["runs"] if r["scheduledFor"])
    wanted = slots_between(registered_at, datetime.now(UTC) - timedelta(seconds=4))
    assert wanted and wanted[-1] > upgraded_at, (wanted, upgraded_at)
    assert {slot: scheduled[slot] for slot in wanted} == dict.fromkeys(wanted, 1), scheduled
    assert max(scheduled.values()) == 1, scheduled  # none doubled
    # Every attempt ran once: the flaky step's two by design, the others' one.
    started = Counter(
        attempt for _t, what, _r, attempt, _pid in read_ledger(ledger) if what == "start"
    )
    assert max(started.values()) == 1, started
    attempts = Counter(st["attempt"] for r in ended for st in r["steps"] if st["id"] != "flaky")
    assert set(attempts) == {1}, attempts
    assert [st["attempt"] for st in ended[2]["steps"]] == [2]
