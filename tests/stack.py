"""A real Heddle stack for tests: a nats-server on a free port with a temporary store, and
each service as its own process, started, SIGKILLed and restarted at will."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.procfs import descendants
from services.embedded_nats import EmbeddedNats, free_port

REPO = Path(__file__).resolve().parent.parent
TERMINAL_RUN = {"succeeded", "failed", "cancelled"}
TERMINAL_STEP = {"succeeded", "failed", "skipped", "cancelled"}


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


@dataclass
class Stack:
    tmp: Path
    settings: dict[str, str] = field(default_factory=dict)
    nats: EmbeddedNats | None = None
    procs: dict[str, Proc] = field(default_factory=dict)
    gateway_port: int = 0
    session: aiohttp.ClientSession | None = None

    # ---- processes ----

    def start_nats(self) -> None:
        if self.nats is None:
            self.nats = EmbeddedNats(
                self.tmp / "nats", port=free_port(), log_file=self.tmp / "nats.log"
            )
        self.nats.start()

    @property
    def nats_url(self) -> str:
        assert self.nats is not None
        return self.nats.url

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
        env.update(self.settings)
        env.update(
            HEDDLE_NATS_URL=self.nats_url,
            PYTHONUNBUFFERED="1",
            HEDDLE_GATEWAY_PORT=str(self.gateway_port),
            PYTHONPATH=str(REPO),
        )
        env.update(extra)
        return env

    def start(
        self,
        name: str,
        service: str | None = None,
        argv_prefix: list[str] | None = None,
        **extra_env: str,
    ) -> Proc:
        """Start (or restart) one service process. ``name`` runner-x starts a runner named so."""
        service = service or ("runner" if name.startswith("runner") else name)
        if service == "runner":
            extra_env.setdefault("HEDDLE_RUNNER_NAME", name)
        argv = [*(argv_prefix or []), sys.executable, "-m", "services.cli", service]
        proc = self.procs.get(name) or Proc(name, argv, {}, self.tmp / f"{name}.log")
        proc.argv = argv
        proc.env = self.env(**extra_env)
        log = open(proc.log_path, "ab")
        proc.popen = subprocess.Popen(
            proc.argv,
            env=proc.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL, with_group: bool = False) -> None:
        proc = self.procs[name]
        # The runner and the commands it started, as a pod dying would take them: the
        # service first, so it cannot see its command die and report it; the commands
        # (found before, while they are still its descendants) right after.
        children = descendants(proc.pid) if with_group else []
        # The service's own process group: the service, and a wrapper such as faketime.
        os.killpg(proc.pid, sig)
        for pid in children:
            with _quiet():
                os.kill(pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            proc.popen.wait(30)  # type: ignore[union-attr]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.alive():
                with _quiet():
                    os.killpg(proc.pid, signal.SIGCONT)
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            if proc.popen is None:
                continue
            try:
                proc.popen.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                with _quiet():
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait()
            with _quiet():  # whatever is left of the group (a wrapper's child)
                os.killpg(proc.pid, signal.SIGKILL)
        if self.nats:
            self.nats.stop()

    def logs(self, name: str) -> str:
        return self.procs[name].log_path.read_text(errors="replace")

    # ---- HTTP ----

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    async def http(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession()
        return self.session

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        session = await self.http()
        async with session.request(method, self.base + path, **kwargs) as resp:
            if resp.content_type == "application/json":
                return resp.status, await resp.json()
            return resp.status, await resp.text()

    async def submit(self, doc: dict[str, Any], expect: int = 201) -> str:
        status, body = await self.request("POST", "/api/runs", json=doc)
        assert status == expect, (status, body)
        return body["runId"]

    async def run(self, run_id: str) -> dict[str, Any]:
        status, body = await self.request("GET", f"/api/runs/{run_id}")
        assert status == 200, (status, body)
        return body

    async def wait_run(
        self, run_id: str, timeout: float = 30.0, statuses: set[str] = TERMINAL_RUN
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status, body = await self.request("GET", f"/api/runs/{run_id}")
            if status == 200 and body["status"] in statuses:
                return body
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} not {statuses} after {timeout}s: {body}")
            await asyncio.sleep(0.05)

    async def wait_step(
        self, run_id: str, step_id: str, statuses: set[str], timeout: float = 30.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status, body = await self.request("GET", f"/api/runs/{run_id}")
            if status == 200:
                step = step_of(body, step_id)
                if step["status"] in statuses:
                    return step
            if time.monotonic() > deadline:
                raise AssertionError(f"step {step_id} not {statuses} after {timeout}s")
            await asyncio.sleep(0.05)

    async def wait_ready(self, runners: int, timeout: float = 30.0) -> None:
        """The gateway answers and the pool shows ``runners`` runners."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                status, body = await self.request("GET", "/api/runners")
                last = body
                if status == 200 and body["total"] == runners:
                    return
            except aiohttp.ClientError as exc:
                last = exc
            await asyncio.sleep(0.05)
        raise AssertionError(f"stack not ready: {last}\n" + self.all_logs())

    def all_logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.logs(n)[-3000:]}" for n in self.procs)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


def step_of(run: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in run["steps"] if s["id"] == step_id)


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], ProcessLookupError | PermissionError)
