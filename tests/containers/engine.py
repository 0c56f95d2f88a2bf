"""A Docker engine for the container tests: the one already answering, or a dockerd of our own.

Our own dockerd never touches the host's firewall (--iptables=false: nothing here may change
it), listens on a socket in a short temporary directory (not the system's), and keeps its data
root under the cache directory, so that base images and build caches outlive one test run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import DEVNULL, STDOUT

START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
BRIDGE = "docker0"


class EngineError(RuntimeError):
    """No Docker engine could be had, or a docker command failed: the message says why."""


def default_cache_dir() -> Path:
    """Where the engine's data root and the base images' tarballs persist between runs."""
    configured = os.environ.get("HEDDLE_CONTAINERS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "heddle" / "containers"


@dataclass
class Engine:
    """A Docker engine: `env` reaches it; `pid` is our dockerd's, None for one we did not start."""

    env: dict[str, str] = field(repr=False)
    pid: int | None = None
    run_dir: Path | None = None
    data_root: Path | None = None
    links_before: frozenset[str] = frozenset()  # the host's network interfaces before it
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    stopped: bool = field(default=False, repr=False)
    compose: list[str] | None = field(default=None, repr=False)  # found at the first use

    def docker(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 900.0,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against this engine; with `check`, a failure raises with stderr."""
        merged = {**self.env, **(env or {})}
        return run(["docker", *args], check=check, timeout=timeout, input=input, env=merged)

    def compose_command(self) -> list[str]:
        """Compose v2 (`docker compose`) when the CLI has it, else v1 (`docker-compose`),
        installed from Debian's packages as root where neither runs."""
        if self.compose is None:
            self.compose = self._find_compose()
        return self.compose

    def _find_compose(self) -> list[str]:
        if self.docker("compose", "version", check=False, timeout=30).returncode == 0:
            return ["docker", "compose"]
        if not shutil.which("docker-compose", path=self.env.get("PATH")) and os.geteuid() == 0:
            apt_install("docker-compose")
        if shutil.which("docker-compose", path=self.env.get("PATH")):
            return ["docker-compose"]
        raise EngineError(
            "no Docker Compose: neither `docker compose` (v2) nor `docker-compose` (v1) runs"
            " (on Debian: apt-get install docker-compose)"
        )

    def stop(self) -> None:
        """Stop our dockerd (SIGTERM, then SIGKILL) and what it leaves; safe to call twice.

        An engine we did not start is left alone. Called from a finally or atexit after a
        failed test too, so every step tolerates what is already gone.
        """
        if self.stopped:
            return
        self.stopped = True
        if self.pid is None:
            return
        bridges = self._bridges() + [BRIDGE] * (BRIDGE not in self.links_before)
        marker = f"{self.run_dir}/" if self.run_dir else None
        before = _our_processes(self.pid, marker)
        if self.process is not None:
            _terminate(self.process, STOP_TIMEOUT)
        _kill_remaining({**before, **_our_processes(None, marker)})
        for bridge in set(bridges) & _links():
            run(["ip", "link", "delete", bridge], check=False)
        _unmount_under([root for root in (self.run_dir, self.data_root) if root is not None])
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _alive(self) -> bool:
        """Whether our dockerd still runs (so its networks can still be listed)."""
        return self.process is not None and self.process.poll() is None

    def _bridges(self) -> list[str]:
        """The Linux bridges of our engine's user-defined networks (Compose's): as it lists
        them, or those made since it started when it is gone."""
        if not self._alive():
            return [link for link in _links() - self.links_before if link.startswith("br-")]
        query = "network ls -q --no-trunc --filter driver=bridge".split()
        listed = self.docker(*query, check=False, timeout=15)
        return [f"br-{network_id[:12]}" for network_id in listed.stdout.split()]


def run(
    command: list[str],
    check: bool = True,
    timeout: float = 900.0,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command, its output captured as text; with `check`, a failure (or running past
    `timeout`) raises an EngineError with the end of its output."""
    try:
        result = subprocess.run(
            command, env=env, cwd=cwd, input=input, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as error:
        raise EngineError(f"`{' '.join(command)}` took over {timeout:.0f} s") from error
    if check and result.returncode != 0:
        detail = (result.stderr.strip() or result.stdout.strip())[-3000:]
        raise EngineError(f"`{' '.join(command)}` failed ({result.returncode}):\n{detail}")
    return result


def start_engine(cache_dir: Path | None = None) -> Engine:
    """The engine already answering `docker info`, else (as root) a dockerd of our own."""
    cache_dir = cache_dir or default_cache_dir()
    env = dict(os.environ)
    if shutil.which("docker", path=env.get("PATH")) and _answers(env):
        return Engine(env=env)
    if os.geteuid() != 0:
        raise EngineError(
            "no Docker engine answers `docker info` (DOCKER_HOST or the default socket), and"
            " starting one needs root: start Docker, set DOCKER_HOST, or run the tests as root"
        )
    if not (shutil.which("dockerd") and shutil.which("docker")):
        apt_install("docker.io")
    return _start_dockerd(cache_dir, env)


def _answers(env: Mapping[str, str]) -> bool:
    """Whether `docker info` reaches a daemon within a few seconds."""
    try:
        result = Engine(env=dict(env)).docker(
            "info", "-f", "{{.ServerVersion}}", check=False, timeout=15
        )
    except (EngineError, OSError):
        return False
    return result.returncode == 0 and bool(result.stdout.strip())


def apt_install(package: str) -> None:
    """apt-get install a host package, after an apt-get update if the lists are stale."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", package]
    if run(install, check=False, env=env).returncode != 0:
        run(["apt-get", "update", "-q"], check=False, env=env)
        run(install, env=env)


def _short_tmp() -> str:
    """A temporary directory short enough for unix socket paths (under 108 bytes)."""
    base = tempfile.gettempdir()
    return base if len(base) <= 40 else "/tmp"


def _start_dockerd(cache_dir: Path, env: dict[str, str]) -> Engine:
    """Start dockerd on a private socket and wait until it answers, or fail with its log."""
    data_root = cache_dir / "docker"
    data_root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="hd-", dir=_short_tmp()))
    socket = run_dir / "docker.sock"
    log_path = cache_dir / "dockerd.log"
    command = ["dockerd", "--iptables=false", "--ip6tables=false", f"--data-root={data_root}"]
    command += [f"--exec-root={run_dir / 'exec'}", f"--pidfile={run_dir / 'docker.pid'}"]
    command.append(f"--host=unix://{socket}")
    links = _links()
    with log_path.open("wb") as log:
        # A session of its own: a Ctrl-C reaches the tests, whose cleanup stops dockerd.
        process = subprocess.Popen(
            command, stdin=DEVNULL, stdout=log, stderr=STDOUT, start_new_session=True
        )
    env = {k: v for k, v in env.items() if k not in ("DOCKER_CONTEXT", "DOCKER_TLS_VERIFY")}
    env["DOCKER_HOST"] = f"unix://{socket}"
    engine = Engine(env, process.pid, run_dir, data_root, links, process)
    try:
        _wait_until_answers(engine, process, log_path)
        _forget_leftovers(engine)
    except BaseException:
        engine.stop()
        raise
    return engine


def _wait_until_answers(engine: Engine, process: subprocess.Popen[bytes], log: Path) -> None:
    """Poll `docker info` until dockerd answers; its exit or START_TIMEOUT fails with the log."""
    deadline = time.monotonic() + START_TIMEOUT
    while not _answers(engine.env):
        if process.poll() is not None:
            raise EngineError(f"dockerd exited ({process.returncode}):\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise EngineError(f"dockerd did not answer in {START_TIMEOUT:.0f} s:\n{_tail(log)}")
        time.sleep(0.5)


def _forget_leftovers(engine: Engine) -> None:
    """Drop the containers, networks and volumes an earlier run left in our data root: only
    images and the build cache persist (a restart policy brings containers back)."""
    ids = engine.docker("ps", "-aq", timeout=60).stdout.split()
    if ids:
        engine.docker("rm", "-f", "-v", *ids, timeout=120, check=False)
    engine.docker("network", "prune", "-f", timeout=60, check=False)
    engine.docker("volume", "prune", "-f", timeout=60, check=False)


def _tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log file (empty when it cannot be read)."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def _links() -> frozenset[str]:
    """The host's network interfaces."""
    return frozenset(path.name for path in Path("/sys/class/net").iterdir())


def _process_table() -> dict[int, tuple[int, str, str]]:
    """Every process: pid -> (parent pid, start time, command line)."""
    table: dict[int, tuple[int, str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            table[int(entry.name)] = (int(fields[1]), fields[19], command)
    return table


def _our_processes(root: int | None, marker: str | None) -> dict[int, str]:
    """dockerd's descendants and whatever names our run directory (containerd's shims, which
    leave dockerd's tree), with their descendants: pid -> start time (against pid reuse)."""
    table = _process_table()
    found = {pid for pid, (_, _, command) in table.items() if marker and marker in command}
    if root is not None and root in table:
        found.add(root)
    queue = list(found)
    while queue:
        parent = queue.pop()
        children = [pid for pid, (ppid, _, _) in table.items() if ppid == parent]
        queue += [pid for pid in children if pid not in found]
        found.update(children)
    found.discard(os.getpid())
    return {pid: table[pid][1] for pid in found}


def _terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, wait up to `timeout`, then SIGKILL, and reap it."""
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def _kill_remaining(processes: Mapping[int, str]) -> None:
    """SIGKILL those of `processes` still running as the same process (same start time)."""
    table = _process_table()
    for pid, started in processes.items():
        if pid in table and table[pid][1] == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def mounts_under(root: Path) -> list[str]:
    """The mount points at or under `root`, deepest first (to unmount before deleting it)."""
    prefix = str(root.resolve()) + "/"
    lines = Path("/proc/self/mounts").read_text().splitlines()
    points = [line.split()[1].replace("\\040", " ") for line in lines if len(line.split()) > 1]
    return sorted((p for p in points if (p + "/").startswith(prefix)), key=len, reverse=True)


def _unmount_under(roots: list[Path]) -> None:
    """Lazily unmount what a killed dockerd left mounted under its directories (overlays,
    network namespaces), so that they can be deleted."""
    for root in roots:
        for point in mounts_under(root):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
