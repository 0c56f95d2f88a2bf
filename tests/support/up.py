"""`heddle up` run as a subprocess, waited for until its gateway lists every runner."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from heddle.services.local.embedded_nats import free_port

from tests.support.stack import REPO
from tests.support.step_uids import own_step_uids


async def wait_http(url: str, token_file: Path, runners: int = 3, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while not token_file.exists():  # made by heddle up before anything starts
        assert time.monotonic() < deadline, f"{token_file} not made"
        await asyncio.sleep(0.05)
    headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        while True:
            try:
                async with http.get(url) as resp:
                    body = await resp.json()
                    if resp.status == 200 and body.get("total") == runners:
                        return body
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, f"{url} not ready"
            await asyncio.sleep(0.1)


@dataclass
class Up:
    proc: subprocess.Popen
    port: int


def start_up(
    tmp_path: Path,
    data: Path,
    runners: int = 3,
    dispatchers: int = 1,
    orchestrators: int = 1,
    pools: tuple[str, ...] = (),
    settings: dict[str, str] | None = None,
) -> Up:
    """``settings``: HEDDLE_* variables for every service (the rest of the test's are left out)."""
    port, nats_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
    env.update(settings or {})
    env["PYTHONPATH"] = str(REPO)
    # As root, each runner holds a step uid on this machine: a range of this worker's own.
    env["HEDDLE_STEP_UIDS"] = own_step_uids()
    argv = [sys.executable, "-m", "heddle.services.cli", "up", "--port", str(port)]
    argv += ["--runners", str(runners), "--data-dir", str(data), "--nats-port", str(nats_port)]
    argv += ["--dispatchers", str(dispatchers), "--orchestrators", str(orchestrators)]
    for pool in pools:
        argv += ["--pool", pool]
    proc = subprocess.Popen(
        argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    return Up(proc, port)


async def run_ended(http: aiohttp.ClientSession, url: str) -> dict:
    """The run's document once it has ended (30 s at most)."""
    for _ in range(600):
        async with http.get(url) as resp:
            run = await resp.json()
        if run["status"] != "running":
            break
        await asyncio.sleep(0.05)
    return run
