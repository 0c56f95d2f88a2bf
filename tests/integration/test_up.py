"""`heddle up`: the whole system from one command, and nothing left behind after it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
from heddle.services.local.embedded_nats import free_port

from bench.procfs import descendants, process_exists
from tests.support.stack import REPO
from tests.support.step_uids import own_step_uids
from tests.support.up import run_ended, start_up, wait_http
from tests.support.workflows import EXAMPLE


async def test_up_serves_the_example_and_stops_cleanly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    started = start_up(tmp_path, data)
    up, port = started.proc, started.port
    try:
        pool = await wait_http(f"http://127.0.0.1:{port}/api/runners", data / "admin-token")
        assert {r["name"] for r in pool["runners"]} == {"runner-0", "runner-1", "runner-2"}
        children = descendants(up.pid)
        assert len(children) >= 7  # nats, orchestrator, dispatcher, 3 runners, gateway
        token = (data / "admin-token").read_text().strip()
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{port}/api/runs", json=EXAMPLE) as resp:
                assert resp.status == 401  # no token, no run
            headers = {"Authorization": f"Bearer {token}"}
            async with http.post(
                f"http://127.0.0.1:{port}/api/runs", json=EXAMPLE, headers=headers
            ) as resp:
                assert resp.status == 201
                run_id = (await resp.json())["runId"]
            for _ in range(200):
                async with http.get(
                    f"http://127.0.0.1:{port}/api/runs/{run_id}", headers=headers
                ) as resp:
                    run = await resp.json()
                if run["status"] != "running":
                    break
                await asyncio.sleep(0.05)
        assert run["status"] == "succeeded"
        assert (tmp_path / "data" / "nats").is_dir()  # the store is kept under --data-dir
    finally:
        up.send_signal(signal.SIGTERM)
        out, _ = up.communicate(timeout=60)
    assert up.returncode == 0, out.decode()[-3000:]
    text = out.decode()
    # Every service's output is prefixed with its name.
    for name in ("orchestrator |", "dispatcher |", "runner-2 |", "gateway |", "heddle | stopped"):
        assert name in text
    assert not [pid for pid in children if process_exists(pid)]
    # Its output is a pipe here, which others could read: where the token is, not the token
    # (on a terminal, the page's address with it: tests/integration/test_up_files.py).
    assert token not in text
    assert f"API token: {data / 'admin-token'} (" in text
    for secret in ("admin-token", "nats-users.json", "nats-auth.conf", "nats-context.json"):
        assert (data / secret).stat().st_mode & 0o777 == 0o600, secret
    assert data.stat().st_mode & 0o777 == 0o700  # the store's commands and records too


async def test_up_gives_its_nats_server_the_go_threads_it_is_told(tmp_path: Path) -> None:
    data = tmp_path / "data"
    started = start_up(tmp_path, data, runners=1, settings={"HEDDLE_NATS_GOMAXPROCS": "3"})
    up, port = started.proc, started.port
    try:
        await wait_http(f"http://127.0.0.1:{port}/api/runners", data / "admin-token", runners=1)
        [server] = [pid for pid in descendants(up.pid) if _runs(pid, b"nats-server")]
        with open(f"/proc/{server}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        assert b"GOMAXPROCS=3" in environ
    finally:
        up.send_signal(signal.SIGTERM)
        out, _ = up.communicate(timeout=60)
    assert up.returncode == 0, out.decode()[-3000:]


def _runs(pid: int, program: bytes) -> bool:
    """Whether ``pid`` runs ``program`` (the base name of its first argument)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].rsplit(b"/", 1)[-1] == program
    except OSError:
        return False


async def test_up_says_up_once_a_submit_is_taken(tmp_path: Path) -> None:
    """The `up:` line comes once the gateway answers: a submit sent on it is accepted, never
    refused for a connection (the services start for a while after they are spawned)."""
    data = tmp_path / "data"
    started = start_up(tmp_path, data, runners=1)
    up = started.proc
    assert up.stdout is not None
    lines: list[str] = []
    try:
        loop = asyncio.get_running_loop()
        while not any(line.startswith("heddle | up: ") for line in lines[-1:]):
            raw = await asyncio.wait_for(loop.run_in_executor(None, up.stdout.readline), 60)
            assert raw, "heddle up ended before saying up:\n" + "".join(lines[-40:])
            lines.append(raw.decode(errors="replace").lstrip())
        headers = {"Authorization": f"Bearer {(data / 'admin-token').read_text().strip()}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            url = f"http://127.0.0.1:{started.port}/api/runs"
            async with http.post(url, json=EXAMPLE) as resp:
                assert resp.status in (201, 202), await resp.text()
    finally:
        up.send_signal(signal.SIGTERM)
        up.communicate(timeout=60)
    assert up.returncode == 0
    # The services' own start lines came before it: it waited for them.
    assert any(line.startswith("gateway |") for line in lines)


async def test_up_names_its_gateway_to_the_command_line_once_it_answers(tmp_path: Path) -> None:
    """The data dir's ``url`` (where `heddle` finds the gateway) appears once the gateway
    answers, so a command that finds it is served at once; it is gone when `up` stops."""
    data = tmp_path / "data"
    started = start_up(tmp_path, data, runners=1)
    up = started.proc
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not (data / "url").exists():
            assert up.poll() is None, "heddle up ended before naming its gateway"
            assert loop.time() < deadline, "no url after 60 s"
            await asyncio.sleep(0.02)
        url = (data / "url").read_text().strip()
        assert url == f"http://127.0.0.1:{started.port}"
        async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as resp:
            assert resp.status == 200  # asked once, at once: no connection refused
    finally:
        up.send_signal(signal.SIGTERM)
        up.communicate(timeout=60)
    assert up.returncode == 0
    assert not (data / "url").exists()


async def test_up_keeps_its_token_and_users_across_starts(tmp_path: Path) -> None:
    """A second start on the same data dir reuses the admin token and the NATS users."""
    data = tmp_path / "data"
    seen = []
    for _ in range(2):
        up = start_up(tmp_path, data, runners=1)
        try:
            await wait_http(
                f"http://127.0.0.1:{up.port}/api/runners", data / "admin-token", runners=1
            )
            seen.append(
                ((data / "admin-token").read_text(), (data / "nats-users.json").read_text())
            )
        finally:
            up.proc.send_signal(signal.SIGTERM)
            out, _ = up.proc.communicate(timeout=60)
        assert up.proc.returncode == 0, out.decode()[-3000:]
    assert seen[0] == seen[1]


async def test_up_runs_several_dispatchers_and_orchestrators_that_share_the_work(
    tmp_path: Path,
) -> None:
    """`heddle up --dispatchers 2 --orchestrators 2`: two dispatcher processes, each under
    its own name, both giving out steps of one wide run, and two orchestrators, each holding
    half the partitions and storing runs of its own."""
    data = tmp_path / "data"
    up = start_up(tmp_path, data, runners=2, dispatchers=2, orchestrators=2)
    try:
        await wait_http(f"http://127.0.0.1:{up.port}/api/runners", data / "admin-token", 2)
        headers = {"Authorization": f"Bearer {(data / 'admin-token').read_text().strip()}"}
        steps = [{"id": f"s{i}", "command": "sleep 0.05"} for i in range(40)]
        base = f"http://127.0.0.1:{up.port}/api/runs"
        async with aiohttp.ClientSession(headers=headers) as http:
            for i in range(8):  # runs spread over both orchestrators' partitions
                async with http.post(base, json={"runId": f"r{i}", "steps": steps[:2]}) as resp:
                    assert resp.status == 201
            async with http.post(base, json={"steps": steps}) as resp:
                assert resp.status == 201
                run_id = (await resp.json())["runId"]
            run = await run_ended(http, f"{base}/{run_id}")
        assert run["status"] == "succeeded"
    finally:
        up.proc.send_signal(signal.SIGTERM)
        out, _ = up.proc.communicate(timeout=60)
    text = out.decode()
    assert up.proc.returncode == 0, text[-3000:]
    assert "2 runners, 2 dispatchers, 2 orchestrators)" in text
    for name in ("orchestrator", "orchestrator-1"):
        lines = [x for x in text.splitlines() if x.lstrip().startswith(f"{name} | ")]
        taken = [json.loads(x.split(" | ", 1)[1]) for x in lines if "partitions taken" in x]
        assert sum(len(t["partitions"]) for t in taken) >= 6, name
        assert any('"msg":"step"' in x for x in lines), name  # it moved runs on
    for name in ("dispatcher", "dispatcher-1"):
        lines = [x for x in text.splitlines() if x.lstrip().startswith(f"{name} | ")]
        assert any('"msg":"dispatching"' in x and f'"dispatcher":"{name}"' in x for x in lines)
        assert any('"msg":"assigned"' in x for x in lines), name


async def test_up_starts_the_runners_of_named_pools(tmp_path: Path) -> None:
    """`heddle up --runners 1 --pool gpu=1:a100`: a runner of the pool gpu, labelled, with
    a step uid of its own (as root), that takes the step asking for its labels."""
    data = tmp_path / "data"
    up = start_up(tmp_path, data, runners=1, pools=("gpu=1:a100",))
    try:
        pool = await wait_http(f"http://127.0.0.1:{up.port}/api/runners", data / "admin-token", 2)
        labels = {r["name"]: (r["pool"], r["labels"]) for r in pool["runners"]}
        assert labels == {
            "runner-0": ("default", ["default"]),
            "runner-gpu-0": ("gpu", ["a100", "gpu"]),
        }
        headers = {"Authorization": f"Bearer {(data / 'admin-token').read_text().strip()}"}
        doc = {"steps": [{"id": "t", "command": "id -u", "runsOn": ["a100"]}]}
        base = f"http://127.0.0.1:{up.port}/api/runs"
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.post(base, json=doc) as resp:
                run_id = (await resp.json())["runId"]
            run = await run_ended(http, f"{base}/{run_id}")
        assert run["status"] == "succeeded", run
        assert run["steps"][0]["attempts"][-1]["runner"] == "runner-gpu-0"
    finally:
        up.proc.send_signal(signal.SIGTERM)
        out, _ = up.proc.communicate(timeout=60)
    assert up.proc.returncode == 0, out.decode()[-3000:]


async def test_up_refuses_a_busy_port(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
        env["PYTHONPATH"] = str(REPO)
        # As root, a runner's step uid is checked first: one no other test holds.
        env["HEDDLE_STEP_UIDS"] = own_step_uids()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "heddle.services.cli",
                "up",
                "--port",
                str(free_port()),
                "--nats-port",
                str(port),
                "--data-dir",
                str(tmp_path / "d"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 2
    assert f"port {port} is already in use" in done.stderr
