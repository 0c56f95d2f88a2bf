"""The real Heddle stack for a benchmark: an embedded nats-server on a free port with a
temporary store, and each service as its own process (as `heddle up` runs them), plus the
process accounting the report needs (peak RSS, CPU seconds) read from /proc."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from heddle.services.local.embedded_nats import EmbeddedNats, free_port, machine_go_threads
from heddle.shared.broker import nats_permissions as perms

from bench.probe import Probe
from bench.processes import REPO, ServiceProcess, StackAuth, service_argv, service_env, stop_all
from bench.procfs import ProcSample, launcher_of, proc_sample
from bench.step_uids import StepUidBlock

# Services to run under cProfile on a CPU clock, e.g. HEDDLE_BENCH_CPROFILE=orchestrator,runner-0:
# each writes bench/results/profiles/<service>.prof when it stops (read it with pstats).
CPROFILE = {n for n in os.environ.get("HEDDLE_BENCH_CPROFILE", "").split(",") if n}
PROFILES_DIR = REPO / "bench" / "results" / "profiles"
# HEDDLE_BENCH_KEEP=1 keeps each stack's folder (heddle-bench-* under the temporary
# directory): the services' logs, to count what they did.
KEEP = os.environ.get("HEDDLE_BENCH_KEEP", "") not in ("", "0")
# The probe's own NATS user, in benchmark stacks only: it follows runs through ordered
# consumers, which the read-only inspector may not create (shared/broker/nats_permissions.py).
API = perms.API
PROBE = perms.User(
    "heddle-bench",
    secrets.token_urlsafe(24),
    perms.Permissions(
        publish=(
            f"{API}.INFO",
            f"{API}.STREAM.NAMES",
            f"{API}.STREAM.INFO.*",
            f"{API}.CONSUMER.CREATE.>",
            f"{API}.CONSUMER.DELETE.>",
            f"{API}.CONSUMER.INFO.>",
            "$JS.FC.>",
        ),
        subscribe=(perms.inbox_prefix("heddle-bench") + ".>",),
    ),
)
# The message budget's tap (bench/messages.py): it reads every message of the account, and
# sends none.
TAP = perms.User(
    "heddle-bench-tap",
    secrets.token_urlsafe(24),
    perms.Permissions(publish=(), subscribe=(">",), publish_deny=(">",)),
)


@dataclass
class BenchStack:
    """NATS plus the four services as separate processes, on free ports, in a temporary
    folder that is removed on ``stop`` (unless ``keep`` is set)."""

    runners: int
    settings: dict[str, str] = field(default_factory=dict)
    orchestrators: int = 1
    dispatchers: int = 1
    keep: bool = KEEP
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="heddle-bench-")))
    nats: EmbeddedNats | None = None
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    gateway_port: int = 0
    auth: StackAuth | None = None
    uids: StepUidBlock | None = None  # its runners' step uids, where they run as root
    monitor_port: int = 0  # nats-server's monitoring endpoint (bench/messages.py)
    prof_port: int = 0  # nats-server's Go profiles: its heap, in the soak (bench/soak.py)
    python: str = sys.executable  # the services' interpreter: another checkout's runs its code

    @property
    def headers(self) -> dict[str, str]:
        assert self.auth is not None
        return self.auth.headers

    def probe(self, ends: str = "events") -> Probe:
        """A probe that reads NATS as its own user and calls the API as admin; ``ends``:
        how it learns that a run ended (bench/probe.py)."""
        return Probe(
            self.base_url,
            self.nats_url,
            headers=self.headers,
            nats_user=(PROBE.name, PROBE.password),
            ends=ends,
        )

    @property
    def monitor_url(self) -> str:
        return f"http://127.0.0.1:{self.monitor_port}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def nats_url(self) -> str:
        assert self.nats is not None
        return self.nats.url

    def _env(self, **extra: str) -> dict[str, str]:
        return service_env(self.settings, self.nats_url, self.gateway_port, **extra)

    def start(self, without: tuple[str, ...] = ()) -> None:
        """As ``heddle up`` runs it: a NATS user per service and runner, an admin token;
        ``without`` the services named (a dispatcher, the gateway)."""
        self.gateway_port = free_port()
        if os.geteuid() == 0 and not {"HEDDLE_STEP_UIDS", "HEDDLE_STEP_USER"} & set(self.settings):
            self.uids = StepUidBlock()
            self.settings["HEDDLE_STEP_UIDS"] = self.uids.setting
        runners = [f"runner-{i}" for i in range(self.runners)]
        self.auth = StackAuth.create(self.tmp, runners, extra=(PROBE, TAP))
        self.monitor_port, self.prof_port = free_port(), free_port()
        self.nats = EmbeddedNats(
            self.tmp / "nats",
            port=free_port(),
            log_file=self.tmp / "nats.log",
            config=self.auth.users.config_path,
            monitor_port=self.monitor_port,
            prof_port=self.prof_port,
            go_threads=machine_go_threads(int(self.settings.get("HEDDLE_NATS_GOMAXPROCS", "0"))),
        )
        self.nats.start()
        more = [f"orchestrator-{i}" for i in range(1, self.orchestrators)]
        others = [f"dispatcher-{i}" for i in range(1, self.dispatchers)]
        for name in ("orchestrator", *more, "dispatcher", *others):
            if name not in without:
                self.start_service(name)
        for i in range(self.runners):
            self.start_service(f"runner-{i}")
        if "gateway" not in without:
            self.start_service("gateway")

    def start_service(self, name: str) -> ServiceProcess:
        kind = next(
            (k for k in ("runner", "orchestrator", "dispatcher") if name.startswith(k)), name
        )
        assert self.auth is not None and self.nats is not None
        if kind == "runner" and self.auth.add_runner(name):
            self.nats.reload()  # the new runner's user
        extra = self.auth.env(kind, name)
        if kind == "orchestrator":
            extra["HEDDLE_ORCHESTRATOR_NAME"] = name
        if kind == "dispatcher":  # several share the one dispatcher user, as `heddle up` runs them
            extra["HEDDLE_DISPATCHER_NAME"] = name
        argv = service_argv(kind, self.python)
        if name in CPROFILE:
            PROFILES_DIR.mkdir(parents=True, exist_ok=True)
            profile = str(PROFILES_DIR / f"{name}.prof")
            argv = [sys.executable, "-m", "bench.cpu_profile", profile, kind]
        svc = self.services.get(name) or ServiceProcess(
            name, argv, self._env(**extra), self.tmp / f"{name}.log"
        )
        svc.argv = argv
        self.services[name] = svc.start()
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
        async with aiohttp.ClientSession(headers=self.headers) as session:
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
        """Counters of every live service process, of each runner's step launcher (its own
        work, where steps run as the step user), and of nats-server."""
        out = {}
        for name, svc in self.services.items():
            if svc.alive():
                s = proc_sample(svc.pid)
                if s is not None:
                    out[name] = s
                launcher = launcher_of(svc.pid) if name.startswith("runner-") else None
                s = proc_sample(launcher) if launcher is not None else None
                if s is not None:
                    out[f"launcher-{name}"] = s
        if self.nats is not None and self.nats.proc is not None:
            s = proc_sample(self.nats.proc.pid)
            if s is not None:
                out["nats-server"] = s
        return out

    def pids(self) -> dict[str, int]:
        """The pid of every live service process and of nats-server, by name."""
        out = {name: svc.pid for name, svc in self.services.items() if svc.alive()}
        if self.nats is not None and self.nats.proc is not None:
            out["nats-server"] = self.nats.proc.pid
        return out

    def store_bytes(self) -> int:
        """What the embedded server's JetStream store takes on disk (allocated blocks)."""
        assert self.nats is not None
        total = 0
        for folder, _dirs, files in os.walk(self.nats.store_dir):
            for name in files:
                with contextlib.suppress(OSError):  # a file the server just removed
                    total += os.stat(os.path.join(folder, name)).st_blocks * 512
        return total

    def kill_with_children(self, name: str) -> None:
        """SIGKILL a service and every process it started, as a pod dying takes them."""
        self.services[name].kill(with_children=True)

    def tail(self, name: str, chars: int = 3000) -> str:
        return self.services[name].tail(chars)

    def stop(self) -> None:
        stop_all(self.services.values())
        if self.nats is not None:
            self.nats.stop()
        if self.uids is not None:
            self.uids.release()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
