"""One step's command as a process group: spawn, stream output, time out, kill.

The command runs as ``/bin/sh -c`` in a new session, so it and everything it starts share one
process group. Killing is of the group (of the uid, where it is the runner's alone:
launcher_main.py), SIGTERM, then SIGKILL after a grace. When the shell exits, whatever it
left running is killed too: a step's processes do not outlive the step. What it ended with
is made in process_result.py; its environment in step_environment.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import warnings
from collections import deque
from collections.abc import Awaitable, Callable

from heddle.services.runner_agent.isolation import StepUser
from heddle.services.runner_agent.launcher import Launcher
from heddle.services.runner_agent.launcher_main import spawn_step
from heddle.services.runner_agent.process_result import ProcessResult, Tail, ended
from heddle.services.runner_agent.workdir import entering, workdir_env
from heddle.shared.wire.contracts import Outcome

log = logging.getLogger("heddle.runner")

READ_CHUNK = 64 * 1024
# After the shell exits, output still in the pipes is read for at most this long.
DRAIN_TIMEOUT = 2.0
# Output read but not yet through the sink; past this the pipes are not read.
MAX_BUFFERED = 256 * 1024

OutputSink = Callable[[str, bytes], Awaitable[None]]  # (stream name, raw bytes as read)


def kill_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class StepProcess:
    """The command spawned with ``posix_spawn`` (no asyncio transports, no thread, no
    child watcher): its exit is learnt from a pidfd and its output read with ``os.read`` when
    the event loop sees the pipes readable, all in one coroutine, so the sink gets each
    stream's bytes in order and the command's output waits while the sink does (up to
    ``MAX_BUFFERED`` bytes read ahead)."""

    def __init__(
        self,
        command: str,
        env: dict[str, str],
        timeout: float | None,
        kill_grace: float,
        tail_bytes: int,
        sink: OutputSink | None = None,
        run_as: StepUser | None = None,
        launcher: Launcher | None = None,
        cwd: str | None = None,
    ) -> None:
        """``cwd``: the attempt's working directory (workdir.py), which the launcher makes."""
        self.command = command
        self.cwd = cwd
        self.env = env
        self.run_as = run_as
        self.launcher = launcher  # spawns the command as run_as
        if (run_as is None) != (launcher is None):
            raise ValueError("a step user needs a launcher, and a launcher a step user")
        self.timeout = timeout
        self.kill_grace = kill_grace
        self.sink = sink
        self.tails = {"stdout": Tail(tail_bytes), "stderr": Tail(tail_bytes)}
        self.pid: int | None = None
        self.returncode: int | None = None
        self._kill_reason: tuple[Outcome, str] | None = None
        self.started = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pipes: dict[int, str] = {}  # read ends still open -> stream name
        self._chunks: deque[tuple[str, bytes]] = deque()
        self._buffered = 0
        self._paused = False
        self._pidfd: int | None = None
        self._exited = False
        self._drained = False  # the drain after the exit has run out of time
        self._waiter: asyncio.Future | None = None
        self._timers: list[asyncio.TimerHandle] = []

    async def run(self) -> ProcessResult:
        self.start()
        return await self.wait()

    def start(self) -> None:
        """Spawn the command (at once, in this call): ``pid`` is known on return."""
        loop = self._loop = asyncio.get_running_loop()
        try:
            self._spawn()
        finally:
            self.started.set()  # also on failure: a kill request must not wait forever
        pid = self.pid
        assert pid is not None
        if self.launcher is None:  # else the launcher reports the exit (_exited_with)
            try:
                self._pidfd = os.pidfd_open(pid)
            except OSError:  # cannot happen for our own unreaped child; never leave it running
                kill_group(pid, signal.SIGKILL)
                os.waitpid(pid, 0)  # killed: at once
                self._close_pipes()
                raise
            loop.add_reader(self._pidfd, self._on_exit)
        for fd in self._pipes:
            loop.add_reader(fd, self._on_output, fd)
        if self.timeout is not None:
            self._timers.append(
                loop.call_later(
                    max(0.0, self.timeout),
                    self.kill,
                    "timed_out",
                    f"timed out after {self.timeout:g} s",
                )
            )

    async def wait(self) -> ProcessResult:
        """Until the shell has exited and its output is read (or the drain ran out of time).
        Cancelled, it kills the group at once."""
        loop, pid = self._loop, self.pid
        assert loop is not None and pid is not None
        tails, sink, chunks = self.tails, self.sink, self._chunks
        try:
            while True:
                while chunks:
                    name, data = chunks.popleft()
                    self._buffered -= len(data)
                    tails[name].add(data)
                    if sink is not None:
                        try:
                            await sink(name, data)
                        except Exception:  # the command is still read, its tails kept
                            log.exception("output of pid %s: sink failed; not sent", pid)
                            sink = None
                if self._paused:
                    self._paused = False
                    for fd in self._pipes:
                        loop.add_reader(fd, self._on_output, fd)
                if self._exited and (not self._pipes or self._drained):
                    break
                self._waiter = loop.create_future()
                await self._waiter
        finally:
            self._waiter = None
            for timer in self._timers:
                timer.cancel()
            self._close_pipes()
            if not self._exited:  # cancelled: the group dies, the exit callback reaps
                kill_group(pid, signal.SIGKILL)
        return ended(
            self._kill_reason, self.returncode, tails["stdout"].text(), tails["stderr"].text()
        )

    def _spawn(self) -> None:
        out_r, out_w = os.pipe()  # both ends close-on-exec; dup2 onto 1 and 2 clears it
        err_r, err_w = os.pipe()
        argv, env = ["/bin/sh", "-c", self.command], self.env
        if self.run_as is not None:
            env = self.run_as.env(env)
        if self.cwd is not None:
            env = workdir_env(env, self.cwd, self.run_as)
            if self.launcher is None:  # a launcher goes there itself
                argv = entering(self.cwd, argv)
        try:
            if self.launcher is not None:
                self.pid = self.launcher.spawn(argv, env, out_w, err_w, self._exited_with, self.cwd)
            else:
                self.pid = spawn_step(argv, env, out_w, err_w)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        os.set_blocking(out_r, False)
        os.set_blocking(err_r, False)
        self._pipes = {out_r: "stdout", err_r: "stderr"}

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _on_output(self, fd: int) -> None:
        try:
            data = os.read(fd, READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            self._chunks.append((self._pipes[fd], data))
            self._buffered += len(data)
            if self._buffered >= MAX_BUFFERED and not self._paused:
                self._paused = True  # the sink is behind: stop reading until it catches up
                for pipe in self._pipes:
                    self._watching().remove_reader(pipe)
        else:
            self._watching().remove_reader(fd)
            del self._pipes[fd]
            os.close(fd)
        self._wake()

    def _on_exit(self) -> None:
        loop, pid, pidfd = self._watching(), self.pid, self._pidfd
        assert pid is not None and pidfd is not None  # called by the pidfd's reader
        loop.remove_reader(pidfd)
        os.close(pidfd)
        self._pidfd = None
        # The shell is a zombie until reaped, so its group id cannot be reused yet: whatever
        # it left running dies now, which also closes the pipes those processes held.
        kill_group(pid, signal.SIGKILL)
        try:
            _, status = os.waitpid(pid, 0)
            code: int | None = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            code = None
        self._exited_with(code)

    def _exited_with(self, code: int | None) -> None:
        """The shell was reaped (here, or by the launcher, which killed its group first)."""
        if self._exited:
            return
        loop = self._watching()
        self.returncode = code
        self._exited = True
        for timer in self._timers:
            timer.cancel()
        self._timers.append(loop.call_later(DRAIN_TIMEOUT, self._drain_expired))
        self._wake()

    def _watching(self) -> asyncio.AbstractEventLoop:
        """The loop the process is watched on, set when it is spawned."""
        loop = self._loop
        assert loop is not None, "not spawned"
        return loop

    def _drain_expired(self) -> None:
        self._drained = True
        self._wake()

    def _close_pipes(self) -> None:
        loop = self._loop
        for fd in self._pipes:
            if loop is not None:
                loop.remove_reader(fd)
            os.close(fd)
        self._pipes = {}
        self._chunks.clear()

    def kill(self, outcome: Outcome, reason: str) -> None:
        """SIGTERM the group (or uid) now, SIGKILL it after the grace; the first reason wins."""
        if self._kill_reason is not None or self.pid is None:
            return
        self._kill_reason = (outcome, reason)
        if self._exited:  # the shell is reaped and its group already killed
            return
        if self.launcher is None or not self.launcher.terminate(self.pid, self.kill_grace):
            kill_group(self.pid, signal.SIGTERM)
        self._timers.append(
            self._watching().call_later(self.kill_grace, kill_group, self.pid, signal.SIGKILL)
        )


def use_pidfd_child_watcher() -> None:
    """Reap children through pidfds rather than a thread per child: faster spawning, and no
    thread with a timed wait (those hang under faketime). Python 3.12+ does this itself."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
