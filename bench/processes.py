"""Heddle's services as separate local processes, for the benchmark and the test suite:
started in their own session with their output in a file, killed as a pod dies (the service
and every command it started), stopped gracefully with a deadline.

Both ``bench/stack.py`` and ``tests/support/stack.py`` build their stacks from this.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from heddle.services.local.nats_users import NatsUsers, write_private
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.core.tokens import new_token

from bench.procfs import descendants

REPO = Path(__file__).resolve().parent.parent


def service_argv(service: str, python: str = sys.executable) -> list[str]:
    """How a service is started: as ``heddle up`` does, ``python -m services.cli <service>``
    (``python``: another checkout's, to run its code)."""
    return [python, "-m", "heddle.services.cli", service]


def service_env(
    settings: dict[str, str], nats_url: str, gateway_port: int, **extra: str
) -> dict[str, str]:
    """This process's environment without any HEDDLE_ setting of the caller's, then
    ``settings``, the stack's NATS URL and gateway port, unbuffered output, the repository
    importable, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
    env.update(settings)
    env["HEDDLE_NATS_URL"] = nats_url
    env["HEDDLE_GATEWAY_PORT"] = str(gateway_port)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


@dataclass
class StackAuth:
    """A local stack's credentials, as ``heddle up`` makes them: a NATS user per service and
    runner (passwords and the server's configuration in ``tmp``) and an admin API token in
    ``tmp/admin-token``. ``extra`` users are the caller's own (a test's superuser)."""

    users: NatsUsers
    token: str
    token_file: Path

    @classmethod
    def create(
        cls,
        tmp: Path,
        runners: list[str] | None = None,
        extra: tuple[perms.User, ...] = (),
        store_max_bytes: int = 0,
    ) -> StackAuth:
        """The users (``runners``' among them: one started later needs a reload, see
        ``add_runner``) and the admin token, written to ``tmp``; the services' account
        stores at most ``store_max_bytes`` (0: no limit)."""
        users = NatsUsers.load(tmp, extra, store_max_bytes)
        users.ensure_runners(runners or [])
        users.save()
        token, token_file = new_token(), tmp / "admin-token"
        write_private(token_file, token + "\n")
        return cls(users, token, token_file)

    def add_runner(self, runner: str) -> bool:
        """Give a runner its user; True if the server's configuration changed."""
        if not self.users.ensure_runners([runner]):
            return False
        self.users.save()
        return True

    def env(self, service: str, name: str) -> dict[str, str]:
        """The credentials of service ``service`` started as ``name``."""
        if service == "runner":
            return self.users.runner_env(name)
        env = self.users.env(service)
        if service == "gateway":
            env["HEDDLE_ADMIN_TOKEN_FILE"] = str(self.token_file)
        return env

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class ServiceProcess:
    name: str  # orchestrator, dispatcher, gateway, runner-0 ...
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen | None = None
    killed: bool = False  # on purpose, by whoever runs it

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> ServiceProcess:
        """Start (or start again), appending to its log file."""
        self.killed = False
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                start_new_session=True,
            )
        return self

    def kill(self, sig: int = signal.SIGKILL, with_children: bool = False) -> None:
        """Signal the service's process group (the service, and a wrapper such as faketime)
        and, with ``with_children``, every process it started, as a dying pod takes them:
        the service first, so it cannot see its command die and report it; the commands,
        found before while they are still its descendants, right after. Waits for the
        service to end after SIGKILL or SIGTERM."""
        self.killed = True
        children = descendants(self.pid) if with_children else []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            assert self.popen is not None
            self.popen.wait(30)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def stop_all(procs: Iterable[ServiceProcess], grace: float = 15.0) -> None:
    """SIGTERM every live service (woken first, if stopped), wait up to ``grace`` seconds in
    all, SIGKILL what is left, and whatever remains of each process group."""
    procs = list(procs)
    for proc in procs:
        if proc.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        if proc.popen is None:
            continue
        try:
            proc.popen.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.popen.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # a wrapper's leftover child
