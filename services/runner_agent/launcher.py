"""The runner's side of the step launcher (launcher_main.py): a process of the step user
that spawns each step, so that a step costs one exec and the runner keeps root.

A spawn is one request on a socket pair, answered with the pid before ``spawn`` returns
(as ``posix_spawn`` itself would); the launcher reports each step's exit code once it has
reaped it, read when the event loop sees the socket readable. The runner watches each step
through a pidfd of its own too: a launcher that dies or stops (a step of the same uid may
signal it) and does not report an exit it should have is killed, its steps are killed and
fail with no exit code, and the next spawn starts another launcher. With ``sweep`` (a uid
of the runner's own) the launcher kills by uid what each step leaves (launcher_main.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from heddle.services.runner_agent.isolation import kill_pipe_holders
from heddle.services.runner_agent.launcher_main import HEADER, RECORD
from heddle.shared.wire.errors import HeddleError

log = logging.getLogger("heddle.runner")

MAIN = str(Path(__file__).with_name("launcher_main.py"))
ANSWER_WITHIN = 5.0  # seconds for the launcher to start, answer a spawn, report an exit
ExitCallback = Callable[[int | None], None]  # the exit code; None if it cannot be known


class LauncherError(HeddleError):
    """The launcher did not start or did not answer: the step was not spawned."""


@dataclass(slots=True)
class _Held:
    """A step the launcher spawned and has not reported the exit of."""

    on_exit: ExitCallback
    pidfd: int | None  # the runner's own watch of the step
    overdue: asyncio.TimerHandle | None = field(default=None)
    grace_until: float = 0.0  # terminated: the launcher reports its exit after this


class Launcher:
    """Spawns steps as ``uid``/``gid`` through a launcher process (``start``, or the first
    spawn, starts it); with ``sweep``, the uid is this runner's alone, and what a step leaves
    is killed by uid."""

    def __init__(
        self, uid: int, gid: int, answer_within: float = ANSWER_WITHIN, sweep: bool = False
    ) -> None:
        self.uid, self.gid, self.sweep = uid, gid, sweep
        self.answer_within = answer_within
        self.pid: int | None = None  # the launcher's
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._held: dict[int, _Held] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Start the launcher now (within the running event loop); LauncherError if it
        does not say it runs as the step user."""
        self._ready()

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        out_w: int,
        err_w: int,
        on_exit: ExitCallback,
        cwd: str | None = None,
    ) -> int:
        """The step's pid, spawned now; ``on_exit`` gets its exit code later. ``cwd``: a
        directory the launcher makes (0700, the step user's) and starts the step in. Raises
        OSError or ValueError as ``posix_spawn`` would, LauncherError if no launcher
        answers."""
        if "\0" in "".join((*argv, *env, *env.values(), cwd or "")):  # one scan of it all
            raise ValueError("embedded null byte")  # as posix_spawn says it
        body = msgspec.json.encode({"argv": argv, "env": env, "cwd": cwd})
        data = HEADER.pack(len(body)) + body
        for tries_left in (1, 0):
            sock = self._ready()
            try:
                sock.settimeout(self.answer_within)
                try:
                    sent = socket.send_fds(sock, [data], [out_w, err_w])
                    # Only what is left: a send of nothing to a launcher that read the whole
                    # request, spawned it and was killed by it still fails (EPIPE).
                    if sent < len(data):
                        sock.sendall(data[sent:])
                finally:
                    sock.setblocking(False)
            except OSError as exc:
                # Gone before it could read the request (a write to a closed peer fails):
                # nothing was spawned, and another launcher may try.
                self._lost(f"was gone ({exc})")
                if tries_left:
                    continue
                raise LauncherError(f"the step launcher is gone: {exc}") from exc
            try:
                kind, pid, value = self._answer(sock)
            except (OSError, LauncherError) as exc:
                # It may have spawned the step (which may itself have killed it): whatever
                # holds the step's pipe dies, and the step is not spawned again.
                kill_pipe_holders(out_w, self.uid, self.gid)
                self._lost(f"did not answer a spawn ({exc})")
                raise LauncherError(f"the step launcher did not answer: {exc}") from exc
            if kind == b"X":
                raise OSError(value, os.strerror(value))
            self._hold(pid, on_exit)
            return pid
        raise AssertionError("unreachable")

    def terminate(self, pid: int, grace: float) -> bool:
        """SIGTERM every process of the uid, step ``pid``'s; the launcher SIGKILLs those
        left once the step has ended and ``grace`` has passed. False where it cannot (a
        uid others may share, no launcher): the caller signals the step's group."""
        held, sock = self._held.get(pid), self._sock
        if not self.sweep or held is None or sock is None:
            return False
        body = msgspec.json.encode({"signal": signal.SIGTERM, "pid": pid, "grace": grace})
        try:
            sock.sendall(HEADER.pack(len(body)) + body)  # a few bytes: never waits
        except OSError:
            return False
        held.grace_until = time.monotonic() + grace
        return True

    def close(self) -> None:
        """The launcher ends at the end of file (with ``sweep``, killing what its steps
        left); the steps it runs are left to the caller."""
        if self._sock is not None:
            if self._loop is not None:
                self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if self.pid is not None:
            _reap(self.pid)
            self.pid = None

    # ---- the steps ----

    def _hold(self, pid: int, on_exit: ExitCallback) -> None:
        loop = self._loop
        assert loop is not None
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except OSError:  # gone already: reaped, and its exit is on its way
            pidfd = None
        held = self._held[pid] = _Held(on_exit, pidfd)
        if pidfd is not None:
            loop.add_reader(pidfd, self._step_ended, pid)
        else:
            held.overdue = loop.call_later(self.answer_within, self._overdue, pid)
        if self._buf:  # its exit may have come with its pid
            loop.call_soon(self._dispatch)

    def _step_ended(self, pid: int) -> None:
        held = self._held.get(pid)
        if held is None or held.pidfd is None or self._loop is None:
            return
        self._loop.remove_reader(held.pidfd)
        os.close(held.pidfd)
        held.pidfd = None
        grace = max(0.0, held.grace_until - time.monotonic())  # the rest waits out its grace
        held.overdue = self._loop.call_later(self.answer_within + grace, self._overdue, pid)

    def _overdue(self, pid: int) -> None:
        if pid in self._held:
            self._lost(f"did not report the exit of pid {pid}")

    def _exited(self, pid: int, code: int | None) -> None:
        held = self._held.pop(pid, None)
        if held is None:
            return
        if held.pidfd is not None:
            if self._loop is not None:
                self._loop.remove_reader(held.pidfd)
            os.close(held.pidfd)
        if held.overdue is not None:
            held.overdue.cancel()
        held.on_exit(code)

    def _lost(self, why: str) -> None:
        """The launcher is gone or stuck: it is killed, and the steps it held are killed and
        reported with no exit code (only their parent could know it)."""
        log.warning("the step launcher %s; its %d step(s) fail", why, len(self._held))
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.close()
        self._buf.clear()
        for pid in list(self._held):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            self._exited(pid, None)

    # ---- the launcher process ----

    def _ready(self) -> socket.socket:
        if self._sock is not None:
            if select.select([self._sock], [], [], 0)[0]:
                self._on_readable()  # an end of file not yet seen: start another
            if self._sock is not None:
                return self._sock
        self._loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [sys.executable, "-I", "-S", MAIN, str(self.uid), str(self.gid)]
        try:
            self.pid = os.posix_spawn(
                sys.executable,
                [*argv, "sweep"] if self.sweep else argv,
                {},
                file_actions=[(os.POSIX_SPAWN_DUP2, theirs.fileno(), 3)],
                # Its own session: a step caught before its own setsid is in the launcher's
                # group, which kill_pipe_holders kills whole, and that must not be the runner's.
                setsid=True,
            )
        finally:
            theirs.close()
        self._sock = ours
        try:
            kind, _, uid = self._answer(ours)
            if (kind, uid) != (b"R", self.uid):
                raise LauncherError(f"it said {kind!r} as uid {uid}")
        except (OSError, LauncherError) as exc:
            self._lost(f"did not start ({exc})")
            raise LauncherError(f"the step launcher did not start: {exc}") from exc
        ours.setblocking(False)
        self._loop.add_reader(ours.fileno(), self._on_readable)
        return ours

    def _answer(self, sock: socket.socket) -> tuple[bytes, int, int]:
        """The next record that is not an exit (those are told), waiting up to
        ``answer_within`` for it."""
        deadline = time.monotonic() + self.answer_within
        while True:
            while len(self._buf) >= RECORD.size:
                kind, pid, value = RECORD.unpack_from(self._buf)
                del self._buf[: RECORD.size]
                if kind != b"E":
                    return kind, pid, value
                self._exited(pid, value)
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                raise LauncherError(f"no answer in {self.answer_within:g} s")
            self._read(sock)

    def _read(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(64 * RECORD.size)
        except BlockingIOError:
            return
        if not data:
            raise LauncherError("it exited")
        self._buf += data

    def _on_readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            self._read(sock)
        except (OSError, LauncherError) as exc:
            self._lost(str(exc))
            return
        self._dispatch()

    def _dispatch(self) -> None:
        """The exits read and not yet told (no answer is left unread between calls)."""
        while len(self._buf) >= RECORD.size:
            _, pid, value = RECORD.unpack_from(self._buf)
            del self._buf[: RECORD.size]
            self._exited(pid, value)


def _reap(pid: int, within: float = 1.0) -> None:
    """The launcher, reaped: it exits at the end of file, or is killed after ``within``
    (stopped by a step, say)."""
    deadline = time.monotonic() + within
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.01)
