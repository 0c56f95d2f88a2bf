"""docker-compose.yml brought up as written, in a project of its own, driven through its
published gateway port and through its containers."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.containers.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = {"succeeded", "failed", "cancelled"}


@dataclass
class Deployment:
    engine: Engine
    project: str
    port: int
    nats_port: int
    token: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    # ---- compose ----

    def compose(self, *args: str, check: bool = True, timeout: float = 300, **kw: Any) -> str:
        env = {
            **self.engine.env,
            "HEDDLE_PORT": str(self.port),
            "HEDDLE_NATS_PORT": str(self.nats_port),
        }
        argv = [*self.engine.compose_command(), "-p", self.project, *args]
        done = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, **kw
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr}")
        return done.stdout

    def containers(self, service: str) -> list[str]:
        """A service's running containers' ids (several for a scaled one)."""
        return self.compose("ps", "-q", service).split()

    def logs(self) -> str:
        return self.compose("logs", "--no-color", check=False)

    # ---- HTTP through the published port ----

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def wait_run(
        self, run_id: str, timeout: float = 60, statuses: set[str] = TERMINAL
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.request("GET", f"/api/runs/{run_id}")
            if status == 200 and body["status"] in statuses:
                return body
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} not {statuses} in {timeout} s: {body}")
            time.sleep(0.2)

    def wait_step(self, run_id: str, step_id: str, statuses: set[str]) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while True:
            status, body = self.request("GET", f"/api/runs/{run_id}")
            if status == 200:
                step = step_of(body, step_id)
                if step["status"] in statuses:
                    return step
            if time.monotonic() > deadline:
                raise AssertionError(f"step {step_id} of {run_id} not {statuses}: {body}")
            time.sleep(0.2)

    def wait_ready(self, runners: int, timeout: float = 120) -> None:
        """Until the gateway answers through the published port and the pool has
        ``runners`` runners."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                status, last = self.request("GET", "/api/runners")
                if status == 200 and last.get("total") == runners:
                    return
            except (OSError, ValueError) as exc:
                last = exc
            time.sleep(0.5)
        raise AssertionError(f"not ready in {timeout} s: {last}\n{self.logs()[-4000:]}")


def step_of(run: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in run["steps"] if s["id"] == step_id)
