"""The real Heddle stack for a benchmark: an embedded nats-server on a free port with a
temporary store, and each service as its own process (as `heddle up` runs them), plus the
process accounting the report needs (peak RSS, CPU seconds) read from /proc."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.procfs import ProcSample, descendants, proc_sample
from services.embedded_nats import EmbeddedNats, free_port

REPO = Path(__file__).resolve().parent.parent
# Services to run under cProfile on a CPU clock, e.g. HEDDLE_BENCH_CPROFILE=orchestrator,runner-0:
# each writes bench/results/profiles/<service>.prof when it stops (read it with pstats).
CPROFILE = {n for n in os.environ.get("HEDDLE_BENCH_CPROFILE", "").split(",") if n}
PROFILES_DIR = REPO / "bench" / "results" / "profiles"


@dataclass
class Service:
    name: str  # orchestrator, dispatcher, gateway, runner-0 ...
    kind: str  # the `heddle` subcommand
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen | None = None
    killed: bool = False  # by the harness, on purpose

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


@dataclass
class BenchStack:
    """NATS plus the four services as separate processes, on free ports, in a temporary
    folder that is removed on ``stop`` (unless ``keep`` is set)."""

    runners: int
    settings: dict[str, str] = field(default_factory=dict)
    keep: bool = False
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="heddle-bench-")))
    nats: EmbeddedNats | None = None
    services: dict[str, Service] = field(default_factory=dict)
    gateway_port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def nats_url(self) -> str:
        assert self.nats is not None
        return self.nats.url

    def _env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
        env.update(self.settings)
        env.update(
            HEDDLE_NATS_URL=self.nats_url,
            HEDDLE_GATEWAY_PORT=str(self.gateway_port),
            PYTHONUNBUFFERED="1",
        )
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        env.update(extra)
        return env

    def start(self) -> None:
        self.gateway_port = free_port()
        self.nats = EmbeddedNats(
            self.tmp / "nats", port=free_port(), log_file=self.tmp / "nats.log"
        )
        self.nats.start()
        for name in ("orchestrator", "dispatcher"):
            self.start_service(name)
        for i in range(self.runners):
            self.start_service(f"runner-{i}")
        self.start_service("gateway")

    def start_service(self, name: str) -> Service:
        kind = "runner" if name.startswith("runner") else name
        extra = {"HEDDLE_RUNNER_NAME": name} if kind == "runner" else {}
        svc = self.services.get(name) or Service(
            name, kind, self._env(**extra), self.tmp / f"{name}.log"
        )
        svc.killed = False
        argv = [sys.executable, "-m", "services.cli", kind]
        if name in CPROFILE:
            PROFILES_DIR.mkdir(parents=True, exist_ok=True)
            argv = [
                sys.executable,
                "-m",
                "bench.cpu_profile",
                str(PROFILES_DIR / f"{name}.prof"),
                kind,
            ]
        with open(svc.log_path, "ab") as log:
            svc.popen = subprocess.Popen(
                argv,
                env=svc.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                start_new_session=True,
            )
        self.services[name] = svc
        return svc

    async def wait_ready(
        self, runners: int | None = -1, available: int | None = None, timeout: float = 60.0
    ) -> None:
        """Until the gateway answers and the pool shows ``runners`` runners (default: the
        stack's; None: any number), ``available`` of them idle (default: all of them)."""
        want = self.runners if runners == -1 else runners
        idle = want if available is None else available
        deadline = time.monotonic() + timeout
        last: object = None
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                for svc in self.services.values():
                    if not svc.killed and svc.popen is not None and svc.popen.poll() is not None:
                        raise RuntimeError(
                            f"{svc.name} exited with {svc.popen.returncode}:\n"
                            + self.tail(svc.name)
                        )
                try:
                    async with session.get(self.base_url + "/api/runners") as resp:
                        body = await resp.json()
                        last = body
                        if (
                            resp.status == 200
                            and (want is None or body["total"] == want)
                            and body["available"] >= (idle or 0)
                        ):
                            return
                except (aiohttp.ClientError, ValueError) as exc:
                    last = exc
                await asyncio.sleep(0.05)
        raise RuntimeError(f"stack not ready after {timeout}s: {last}")

    def samples(self) -> dict[str, ProcSample]:
        """Counters of every live service process, and of nats-server."""
        out = {}
        for name, svc in self.services.items():
            if svc.alive():
                s = proc_sample(svc.pid)
                if s is not None:
                    out[name] = s
        if self.nats is not None and self.nats.proc is not None:
            s = proc_sample(self.nats.proc.pid)
            if s is not None:
                out["nats-server"] = s
        return out

    def kill_with_children(self, name: str) -> None:
        """SIGKILL a service and every process it started, as a pod dying takes them."""
        svc = self.services[name]
        svc.killed = True
        # The service first, so it cannot see its command die and report it.
        for pid in [svc.pid, *descendants(svc.pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        assert svc.popen is not None
        svc.popen.wait(30)

    def tail(self, name: str, chars: int = 3000) -> str:
        try:
            return self.services[name].log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        for svc in self.services.values():
            if svc.alive():
                with contextlib.suppress(ProcessLookupError):
                    svc.popen.terminate()  # type: ignore[union-attr]
        deadline = time.monotonic() + 15
        for svc in self.services.values():
            if svc.popen is None:
                continue
            try:
                svc.popen.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                svc.popen.kill()
                svc.popen.wait()
        if self.nats is not None:
            self.nats.stop()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
