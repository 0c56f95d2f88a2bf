"""A real Heddle stack for tests: a nats-server on a free port with a temporary store, and
each service as its own process, started, SIGKILLed and restarted at will."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import nats
from heddle.services.local.embedded_nats import EmbeddedNats, free_port
from heddle.shared.broker import nats_permissions as perms
from nats.aio.client import Client

from bench.processes import REPO as REPO  # what tests import from here
from bench.processes import ServiceProcess, StackAuth, service_argv, service_env, stop_all

Proc = ServiceProcess
TERMINAL_RUN = {"succeeded", "failed", "cancelled"}
TERMINAL_STEP = {"succeeded", "failed", "skipped", "cancelled"}
# The tests' own NATS user, allowed everything: it plays the parts a test needs (a forged
# event, a broker's view). Only test stacks have it; `heddle up` has no such user.
SUPERUSER = "heddle-test"
SUPERUSER_PASSWORD = "test-" + SUPERUSER


def freeze(pid: int, within: float = 5.0) -> None:
    """SIGSTOP ``pid``, and return once every thread of it is stopped: a thread running on
    another core takes the signal a moment later, and could answer one more request."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + within
    while not frozen(pid):
        assert time.monotonic() < deadline, f"pid {pid} did not stop"
        time.sleep(0.001)


def frozen(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped."""
    return all(_stopped(pid, tid) for tid in os.listdir(f"/proc/{pid}/task"))


def _stopped(pid: int, tid: str) -> bool:
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except FileNotFoundError:  # the thread ended meanwhile
        return True


def auth_with_superuser(tmp: Path, runners: list[str], store_max_bytes: int = 0) -> StackAuth:
    """The stack's users, the tests' superuser among them (in the services' account, whose
    store holds at most ``store_max_bytes``, 0: no limit)."""
    everything = perms.Permissions(publish=(">",), subscribe=(">",))
    superuser = perms.User(SUPERUSER, SUPERUSER_PASSWORD, everything)
    return StackAuth.create(tmp, runners, extra=(superuser,), store_max_bytes=store_max_bytes)


@dataclass
class Stack:
    tmp: Path
    settings: dict[str, str] = field(default_factory=dict)
    nats: EmbeddedNats | None = None
    procs: dict[str, Proc] = field(default_factory=dict)
    gateway_port: int = 0
    session: aiohttp.ClientSession | None = None
    auth: StackAuth | None = None
    # Services that serve their metrics (HEDDLE_METRICS_PORT), by process name -> port.
    metrics_ports: dict[str, int] = field(default_factory=dict)

    # ---- processes ----

    def start_nats(self, runners: tuple[str, ...] = ()) -> None:
        """Start (or start again) the server; the first start makes the users, ``runners``'
        among them (a runner started later gets its user through a reload)."""
        if self.nats is None:
            limit = int(self.settings.get("HEDDLE_STORE_MAX_BYTES", "0"))
            self.auth = auth_with_superuser(self.tmp, list(runners), limit)
            self.nats = EmbeddedNats(
                self.tmp / "nats",
                port=free_port(),
                log_file=self.tmp / "nats.log",
                config=self.auth.users.config_path,
            )
        self.nats.start()

    @property
    def admin_token(self) -> str:
        assert self.auth is not None
        return self.auth.token

    def auth_headers(self) -> dict[str, str]:
        assert self.auth is not None
        return self.auth.headers

    def nats_password(self, user: str) -> str:
        if user == SUPERUSER:
            return SUPERUSER_PASSWORD
        assert self.auth is not None
        return self.auth.users.passwords[user]

    async def connect(self, user: str = SUPERUSER, **options: Any) -> Client:
        """A NATS connection as ``user`` (the tests' superuser by default)."""
        return await nats.connect(
            self.nats_url,
            user=user,
            password=self.nats_password(user),
            inbox_prefix=perms.inbox_prefix(user),
            **options,
        )

    @property
    def nats_url(self) -> str:
        assert self.nats is not None
        return self.nats.url

    def env(self, **extra: str) -> dict[str, str]:
        return service_env(self.settings, self.nats_url, self.gateway_port, **extra)

    def start(
        self,
        name: str,
        service: str | None = None,
        argv_prefix: list[str] | None = None,
        python: str | None = None,
        **extra_env: str,
    ) -> Proc:
        """Start (or restart) one service process. ``name`` runner-x starts a runner named so,
        dispatcher-x one more dispatcher (HEDDLE_DISPATCHER_NAME, the dispatcher user);
        ``python``: another interpreter than this one (another release's, tests/upgrade)."""
        service = service or next(
            (s for s in ("runner", "dispatcher", "orchestrator") if name.startswith(s)), name
        )
        assert self.auth is not None and self.nats is not None
        if service == "dispatcher":
            extra_env.setdefault("HEDDLE_DISPATCHER_NAME", name)
        if service == "orchestrator":
            extra_env.setdefault("HEDDLE_ORCHESTRATOR_NAME", name)
        if service == "runner":
            runner = extra_env.setdefault("HEDDLE_RUNNER_NAME", name)
            if self.auth.add_runner(runner):
                self.nats.reload()  # the new runner's user
            credentials = self.auth.env(service, runner)
        else:
            credentials = self.auth.env(service, name)
        if name in self.metrics_ports:
            extra_env.setdefault("HEDDLE_METRICS_PORT", str(self.metrics_ports[name]))
        command = service_argv(service)
        argv = [*(argv_prefix or []), python or command[0], *command[1:]]
        proc = self.procs.get(name) or Proc(name, argv, {}, self.tmp / f"{name}.log")
        proc.argv = argv
        proc.env = self.env(**{**credentials, **extra_env})
        self.procs[name] = proc.start()
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL, with_group: bool = False) -> None:
        """Signal a service (SIGKILL by default); ``with_group`` also every process it
        started, as a pod dying would take them."""
        self.procs[name].kill(sig, with_children=with_group)

    def stop_all(self) -> None:
        stop_all(self.procs.values())
        if self.nats:
            self.nats.stop()

    def assert_no_secret_in_output(self) -> None:
        """No service printed the admin token or a NATS password, in the whole life of
        the stack (every stack a test starts is checked when it ends)."""
        if self.auth is None:
            return
        secrets = {"the admin token": self.auth.token}
        secrets.update({f"{u}'s password": p for u, p in self.auth.users.passwords.items()})
        for name in self.procs:
            text = self.logs(name)
            leaked = [what for what, secret in secrets.items() if secret in text]
            assert not leaked, f"{name}'s output shows {', '.join(leaked)}"

    def logs(self, name: str) -> str:
        return self.procs[name].log_path.read_text(errors="replace")

    # ---- HTTP ----

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    async def http(self) -> aiohttp.ClientSession:
        """A session that sends the admin token."""
        if self.session is None:
            self.session = aiohttp.ClientSession(headers=self.auth_headers())
        return self.session

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        session = await self.http()
        async with session.request(method, self.base + path, **kwargs) as resp:
            if resp.content_type == "application/json":
                return resp.status, await resp.json()
            return resp.status, await resp.text()

    async def submit(self, doc: dict[str, Any], expect: int | tuple[int, ...] = 201) -> str:
        status, body = await self.request("POST", "/api/runs", json=doc)
        assert status in (expect if isinstance(expect, tuple) else (expect,)), (status, body)
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
                raise AssertionError(
                    f"run {run_id} not {statuses} after {timeout}s: {body}\n{self.gone()}"
                )
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

    async def wait_history(
        self, workflow: str, succeeded: int, timeout: float = 20.0
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Until ``succeeded`` runs of a workflow have succeeded: its history (newest first,
        up to 1000 runs) and the succeeded ones in it."""
        deadline = time.monotonic() + timeout
        while True:
            _, body = await self.request("GET", f"/api/workflows/{workflow}/runs?limit=1000")
            done = [r for r in body["runs"] if r["status"] == "succeeded"]
            if len(done) >= succeeded:
                return body["runs"], done
            assert time.monotonic() < deadline, body
            await asyncio.sleep(0.1)

    async def wait_ready(self, runners: int, timeout: float = 30.0) -> None:
        """The gateway answers, the pool shows ``runners`` runners, every dispatcher
        running has heard of each (the registry can be ahead of a dispatcher's own view,
        and a step submitted in between would wait for a runner that is in fact free), and
        every orchestrator running has started (nothing else waits for one)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                status, body = await self.request("GET", "/api/runners")
                last = body
                if (
                    status == 200
                    and body["total"] == runners
                    and self._dispatchers_know()
                    and self._orchestrators_started()
                ):
                    return
            except aiohttp.ClientError as exc:
                last = exc
            await asyncio.sleep(0.05)
        raise AssertionError(f"stack not ready: {last}\n" + self.all_logs())

    def _dispatchers_know(self) -> bool:
        """Every running dispatcher has logged each runner of this stack joining its pool."""
        names_ = [n for n in self.procs if n.startswith("runner-")]
        return all(
            f'"msg":"runner joined","runner":"{r}"' in self.logs(d)
            for d, proc in self.procs.items()
            if d.startswith("dispatcher") and proc.alive()
            for r in names_
        )

    def _orchestrators_started(self) -> bool:
        return all(
            '"msg":"started"' in self.logs(name)
            for name, proc in self.procs.items()
            if name.startswith("orchestrator") and proc.alive()
        )

    def gone(self) -> str:
        """Which services are not running (a wait that failed may be why), with their logs'
        last lines."""
        dead = [n for n, p in self.procs.items() if not p.alive()]
        return "\n".join(f"--- {n} is not running\n{self.logs(n)[-2000:]}" for n in dead)

    def all_logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.logs(n)[-3000:]}" for n in self.procs)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


def step_statuses(run: dict[str, Any]) -> dict[str, str]:
    """Each step's status in a run document, by id."""
    return {s["id"]: s["status"] for s in run["steps"]}


def step_of(run: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in run["steps"] if s["id"] == step_id)


async def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Until ``check()`` holds; AssertionError(``what``) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30) -> None:
    """Asks ``check`` until it holds; fails saying ``what`` never happened."""
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"{what} never happened"
        await asyncio.sleep(0.05)


# Short intervals for every stack a test starts: nothing waits for the defaults.
FAST = {
    "HEDDLE_HEARTBEAT_INTERVAL": "0.2",
    "HEDDLE_HEARTBEAT_GRACE": "3",
    "HEDDLE_WATCHDOG_SCAN": "0.2",
    "HEDDLE_REGISTRY_INTERVAL": "0.3",
    "HEDDLE_REGISTRY_TTL": "2",
    "HEDDLE_ASSIGN_TIMEOUT": "1",
    "HEDDLE_READY_ACK_WAIT": "2",
    "HEDDLE_KILL_GRACE": "1",
    "HEDDLE_SHUTDOWN_GRACE": "3",
    "HEDDLE_RETRY_BASE": "0.2",
    "HEDDLE_RETRY_CAP": "2",
    # A frozen broker's 503 after 3 s, not 10 (the cluster test keeps 10: a leader election).
    "HEDDLE_NATS_TIMEOUT": "3",
    # Steps run as the runner's own user: they read and write the tests' temporary files,
    # which the step user could not reach (tests/integration/test_security.py runs them as nobody).
    "HEDDLE_STEP_USER": "none",
}


StackFactory = Callable[..., Awaitable[Stack]]
