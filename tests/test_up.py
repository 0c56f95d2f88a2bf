"""`heddle up`: the whole system from one command, and nothing left behind after it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from bench.procfs import descendants, process_exists
from services.embedded_nats import free_port
from tests.stack import REPO
from tests.test_e2e_basic import EXAMPLE


async def wait_http(url: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url) as resp:
                    body = await resp.json()
                    if resp.status == 200 and body.get("total") == 3:
                        return body
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, f"{url} not ready"
            await asyncio.sleep(0.1)


async def test_up_serves_the_example_and_stops_cleanly(tmp_path: Path) -> None:
    port, nats_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
    env["PYTHONPATH"] = str(REPO)
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli",
            "up",
            "--port",
            str(port),
            "--runners",
            "3",
            "--data-dir",
            str(tmp_path / "data"),
            "--nats-port",
            str(nats_port),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        pool = await wait_http(f"http://127.0.0.1:{port}/api/runners")
        assert {r["name"] for r in pool["runners"]} == {"runner-0", "runner-1", "runner-2"}
        children = descendants(up.pid)
        assert len(children) >= 7  # nats, orchestrator, dispatcher, 3 runners, gateway
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{port}/api/runs", json=EXAMPLE) as resp:
                assert resp.status == 201
                run_id = (await resp.json())["runId"]
            for _ in range(200):
                async with http.get(f"http://127.0.0.1:{port}/api/runs/{run_id}") as resp:
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


async def test_up_refuses_a_busy_port(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
        env["PYTHONPATH"] = str(REPO)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "services.cli",
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
