"""The Python client (heddle.shared.api) against a real stack, the sync Client and the
AsyncClient through the same scenario: submit, the run's events, wait, logs read and
followed, a failed step then its retry, cancel, register and trigger with parameters; and its
errors typed (a 400 with its problems, a 404, a document with problems, no gateway). The
parts without I/O: tests/unit/shared/api/."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from heddle.services.local.embedded_nats import free_port
from heddle.shared.api import AsyncClient, BadDocument, Client, LogEnd, Refused, Unreachable
from heddle.shared.api.answers import LineDoc, RunChange, RunEnd, StepChange

from tests.support.stack import Stack, StackFactory


class Threaded:
    """The sync client, each call made in a thread and awaited: one scenario drives both."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return call

    async def collect(self, stream: str, *args: Any) -> list[Any]:
        return await asyncio.to_thread(lambda: list(getattr(self.client, stream)(*args)))


class Awaited:
    """The async client as the scenario calls it."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def collect(self, stream: str, *args: Any) -> list[Any]:
        return [event async for event in getattr(self.client, stream)(*args)]


async def a_failed_step_then_its_retry(api: Any, s: Stack, tmp_path: Path, name: str) -> None:
    mark = tmp_path / f"{name}.once"
    flaky = f"test -e {mark} || {{ touch {mark}; echo first >&2; exit 3; }}"
    flow = {"steps": [{"id": "hello", "command": "echo hello"}]}
    flow["steps"].append({"id": "flaky", "command": flaky, "dependsOn": ["hello"]})
    sent = await api.submit(flow, run_id=f"{name}-1")
    assert (sent.run_id, sent.created) == (f"{name}-1", True)

    told = await api.collect("events", sent.run_id)
    assert isinstance(told[0], RunChange | StepChange)
    assert isinstance(told[-1], RunEnd) and told[-1].status == "failed"
    changes = {(e.step_id, e.status) for e in told if isinstance(e, StepChange)}
    assert {("hello", "succeeded"), ("flaky", "failed")} <= changes

    run = await api.wait(sent.run_id, 30)
    assert run.status == "failed"
    assert [(st.id, st.status, st.exit_code) for st in run.steps] == [
        ("hello", "succeeded", 0),
        ("flaky", "failed", 3),
    ]
    hello = await api.logs(sent.run_id, "hello")
    assert "hello" in [line.text for line in hello.lines if line.stream == "stdout"]
    followed = await api.collect("follow", sent.run_id, "flaky")
    assert "first" in [e.text for e in followed if isinstance(e, LineDoc)]
    assert isinstance(followed[-1], LogEnd) and followed[-1].exit_code == 3

    again = await api.retry(sent.run_id)
    done = await api.wait(again.run_id, 30)
    assert done.status == "succeeded" and done.retry_of == sent.run_id
    assert {st.id: st.status for st in done.steps} == {"hello": "succeeded", "flaky": "succeeded"}


async def a_cancelled_run(api: Any, s: Stack, name: str) -> None:
    sent = await api.submit({"steps": [{"id": "S", "command": "sleep 30"}]}, run_id=f"{name}-2")
    await s.wait_step(sent.run_id, "S", {"running"})
    assert (await api.cancel(sent.run_id)).status in ("cancelling", "cancelled")
    run = await api.wait(sent.run_id, 30)
    assert (run.status, run.steps[0].status) == ("cancelled", "cancelled")


async def a_registered_workflow_triggered(api: Any, name: str) -> None:
    greet = {
        "name": f"{name}-greet",
        "params": [{"name": "who"}],
        "steps": [{"id": "say", "command": 'echo "hi $HEDDLE_PARAM_WHO"'}],
    }
    made = await api.register(greet)
    assert (made.name, made.version, made.created) == (f"{name}-greet", 1, True)
    assert (await api.register(greet)).created is False
    started = await api.trigger(f"{name}-greet", {"who": "ada"})
    assert (started.workflow, started.version) == (f"{name}-greet", 1)
    run = await api.wait(started.run_id, 30)
    assert (run.status, run.params, run.workflow_name) == (
        "succeeded",
        {"who": "ada"},
        greet["name"],
    )
    assert "hi ada" in [line.text for line in (await api.logs(started.run_id, "say")).lines]
    listed = await api.history(f"{name}-greet")
    assert [r.run_id for r in listed.runs] == [started.run_id]

    with pytest.raises(Refused) as refused:
        await api.trigger(f"{name}-greet", {"whom": "x"})
    assert refused.value.status == 400
    assert [p.path for p in refused.value.problems] == ["params.whom", "params.who"]
    assert "unknown parameter 'whom'" in str(refused.value)


async def scenario(api: Any, s: Stack, tmp_path: Path, name: str) -> None:
    await a_failed_step_then_its_retry(api, s, tmp_path, name)
    await a_cancelled_run(api, s, name)
    await a_registered_workflow_triggered(api, name)
    with pytest.raises(Refused) as missing:
        await api.run("no-such-run")
    assert missing.value.status == 404 and missing.value.problems == []
    with pytest.raises(BadDocument) as bad:
        await api.submit({"steps": [{"id": "a", "command": "x"}, {"id": "a", "command": ""}]})
    assert sorted(bad.value.lines()) == [
        "steps[1].command: command is empty",
        "steps[1].id: duplicate step id 'a' (first at steps[0])",
    ]


async def test_the_sync_client_through_whole_runs(stack: StackFactory, tmp_path: Path) -> None:
    s = await stack(runners=2)
    await scenario(Threaded(Client(s.base, token=s.admin_token)), s, tmp_path, "sync")


async def test_the_async_client_through_whole_runs(stack: StackFactory, tmp_path: Path) -> None:
    s = await stack(runners=2)
    async with AsyncClient(s.base, token=s.admin_token) as client:
        await scenario(Awaited(client), s, tmp_path, "async")


async def test_no_gateway_is_unreachable_and_config_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(Unreachable, match=f"the gateway at {nobody} did not answer"):
        await asyncio.to_thread(Client(nobody, token="t").runs)
    async with AsyncClient(nobody, token="t") as client:
        with pytest.raises(Unreachable):
            await client.runs()
    monkeypatch.chdir(tmp_path)  # no .heddle here
    monkeypatch.setenv("HEDDLE_URL", nobody + "/")
    monkeypatch.setenv("HEDDLE_TOKEN", "from-env")
    monkeypatch.setenv("HEDDLE_NAMESPACE", "team-a")
    conn = Client().connection
    assert (conn.url, conn.token, conn.namespace) == (nobody, "from-env", "team-a")
    assert Client(namespace="team-b", token="mine").connection.namespace == "team-b"


def test_the_sync_client_and_the_command_line_import_no_event_loop() -> None:
    """A script on Client, or a command that reads a run, starts no event loop: neither
    aiohttp nor asyncio is imported (heddle.shared.api names AsyncClient lazily)."""
    code = (
        "import sys\n"
        "from heddle.shared.api import Client, Refused\n"
        "from heddle.services.cli import commands, main\n"
        "print(sorted(m for m in ('aiohttp', 'asyncio', 'nats') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"
