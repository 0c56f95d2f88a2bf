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

    env: dict[str, str]
    pid: int | None = None
    run_dir: Path | None = None
    data_root: Path | None = None
    remove_bridge: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    stopped: bool = field(default=False, repr=False)

    def docker(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 900.0,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against this engine; with `check`, a failure raises with stderr."""
        command = ["docker", *args]
        try:
            result = subprocess.run(
                command,
                env={**self.env, **(env or {})},
                input=input,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise EngineError(f"`{' '.join(command)}` took over {timeout:.0f} s") from error
        if check and result.returncode != 0:
            detail = (result.stderr.strip() or result.stdout.strip())[-3000:]
            raise EngineError(f"`{' '.join(command)}` failed ({result.returncode}):\n{detail}")
        return result

    def compose_command(self) -> list[str]:
        """Compose v2 (`docker compose`) when the CLI has it, else v1 (`docker-compose`)."""
        if self.docker("compose", "version", check=False, timeout=30).returncode == 0:
            return ["docker", "compose"]
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
        bridges = self._bridges() if self._alive() else []
        marker = f"{self.run_dir}/" if self.run_dir else None
        before = _our_processes(self.pid, marker)
        _terminate(self.pid, self.process, STOP_TIMEOUT)
        _kill_remaining({**before, **_our_processes(None, marker)})
        if self.remove_bridge:
            bridges.append(BRIDGE)
        for bridge in bridges:
            if _link_exists(bridge):
                subprocess.run(["ip", "link", "delete", bridge], capture_output=True, check=False)
        roots = [p for p in (self.run_dir, self.data_root) if p is not None]
        _unmount_under(roots)
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _alive(self) -> bool:
        """Whether our dockerd still runs (so its networks can still be listed)."""
        if self.process is not None:
            return self.process.poll() is None
        return self.pid is not None and _process_table().get(self.pid) is not None

    def _bridges(self) -> list[str]:
        """The Linux bridges of the user-defined networks (Compose's) of our engine."""
        listed = self.docker(
            "network", "ls", "-q", "--no-trunc", "--filter", "driver=bridge",
            check=False, timeout=15,
        )
        ids = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
        return [f"br-{network_id[:12]}" for network_id in ids]


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
    _install_docker()
    return _start_dockerd(cache_dir, env)


def _answers(env: Mapping[str, str]) -> bool:
    """Whether `docker info` reaches a daemon within a few seconds."""
    try:
        result = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            env=dict(env), capture_output=True, text=True, timeout=15, check=False,
        )
    except (subprocess.TimeoutExpired, OSError):
        return False
    return result.returncode == 0 and bool(result.stdout.strip())


def _install_docker() -> None:
    """apt-get install docker.io when dockerd or docker is missing (an update first if needed)."""
    if shutil.which("dockerd") and shutil.which("docker"):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "docker.io"]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode == 0:
        return
    subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
    result = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise EngineError(f"apt-get install docker.io failed:\n{result.stderr[-2000:]}")


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
    command = [
        "dockerd", "--iptables=false", "--ip6tables=false",
        "--data-root", str(data_root), "--exec-root", str(run_dir / "exec"),
        "--pidfile", str(run_dir / "docker.pid"), "--host", f"unix://{socket}",
    ]
    bridge_existed = _link_exists(BRIDGE)
    with log_path.open("wb") as log:
        # A session of its own: a Ctrl-C reaches the tests, whose cleanup stops dockerd.
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    env = {k: v for k, v in env.items() if k not in ("DOCKER_CONTEXT", "DOCKER_TLS_VERIFY")}
    env["DOCKER_HOST"] = f"unix://{socket}"
    engine = Engine(
        env=env, pid=process.pid, run_dir=run_dir, data_root=data_root,
        remove_bridge=not bridge_existed, process=process,
    )
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
    """Drop the containers, networks and volumes a crashed earlier run left in our data root.

    Only images and the build cache are meant to persist: a Compose service with a restart
    policy would otherwise come back when dockerd starts.
    """
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


def _link_exists(name: str) -> bool:
    """Whether a network interface of that name exists."""
    return Path("/sys/class/net", name).exists()


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


def _terminate(pid: int, process: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """SIGTERM, wait up to `timeout`, then SIGKILL; reap it when it is our child."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _running(pid, process):
        time.sleep(0.2)
    if _running(pid, process):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def _running(pid: int, process: subprocess.Popen[bytes] | None) -> bool:
    """Whether the process still runs (a zombie does not count)."""
    if process is not None:
        return process.poll() is None
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def _kill_remaining(processes: Mapping[int, str]) -> None:
    """SIGKILL those of `processes` still running as the same process (same start time)."""
    table = _process_table()
    for pid, started in processes.items():
        if pid in table and table[pid][1] == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _unmount_under(roots: list[Path]) -> None:
    """Lazily unmount what a killed dockerd left mounted under its directories (overlays,
    network namespaces), deepest first, so that they can be deleted."""
    prefixes = [str(root.resolve()) + "/" for root in roots]
    with contextlib.suppress(OSError):
        lines = Path("/proc/self/mounts").read_text().splitlines()
        points = [line.split()[1].replace("\\040", " ") for line in lines if len(line.split()) > 1]
        for point in sorted(points, key=len, reverse=True):
            if any(point.startswith(prefix) for prefix in prefixes):
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
