"""The step launcher: a small process that runs as the step user and spawns each step.

Started by the runner (services/runner_agent/launcher.py) as root with an empty environment
and the runner's end of a socket pair as fd 3, it drops to the step user's ids for good,
then serves requests: each a spawn of ``/bin/sh -c`` in a new session with the two pipes
that came with it, in the working directory it makes for it (services/runner_agent/
workdir.py), answered with the pid; and reports each step's exit status once it has
killed what the step left and reaped it. One ``posix_spawn`` (a vfork) per step: dropping
the ids in each step's own process would cost a fork of the runner or a second exec.

Where the uid is the runner's alone (``sweep``: HEDDLE_STEP_UIDS, one step at a time), what
a step left is every other process of the uid, however it hid (a new session, a double
fork): after reaping the step the launcher SIGKILLs them all with one ``kill(-1)`` (every
process it may signal but itself) and, as their subreaper, reaps them before it reports the
exit. A timeout or a cancel (a ``signal`` request) SIGTERMs them all, and those left when the
step has ended and the grace has passed are SIGKILLed. It kills them all when it starts too
(what a lost launcher's steps left) and when the runner is gone. Then, each of those times,
what the uid made at the top of /tmp, /var/tmp and /dev/shm is removed (leftovers.py): its
files are its steps' alone, as its processes are. Elsewhere (a uid others may share) only
the step's process group is killed, and no file.

Standard library only, run with ``python -I -S``: it imports nothing of Heddle's, reads no
environment and holds no credential. It is non-dumpable, so a step (same uid) can signal it
but neither trace it nor take its socket. On end of file (the runner gone) it exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import importlib.util
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from types import ModuleType

# kind, pid, value: b"R" ready (its uid), b"S" spawned, b"X" not (errno), b"E" exit code
RECORD = struct.Struct("!cii")
HEADER = struct.Struct("!I")  # the request's length; the two pipes come with its first byte
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
SWEEP_WAIT = 1.0  # seconds at most to reap the killed (one stuck in the kernel is left dying)
Steps = dict[int, float | None]  # spawned, not reported -> when its SIGTERM's grace ends


def drop_to(uid: int, gid: int, sweep: bool = False) -> None:
    """The step user's ids, for good (a launcher that is not root runs as itself)."""
    if os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # cleared by the id change
    if sweep:  # what a step leaves is reparented here, not to init: reaped, and counted
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def kill_all(sig: int) -> None:
    """``sig`` to every process this one may signal but itself: with a uid of its own, to
    every process of its steps (one call, however many; a fork under way is not missed)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, sig)


def reap_children(until: float) -> None:
    """Reap children until none is left or the monotonic clock passes ``until``. With the
    step reaped, every process it left is a child or a child's descendant: none left, none
    of them runs."""
    pause = 0.0001
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        left = until - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.01)


def read_request(sock: socket.socket) -> tuple[dict, list[int]] | None:
    head, fds, _, _ = socket.recv_fds(sock, HEADER.size, 2)
    for fd in fds:
        os.set_inheritable(fd, False)  # the step gets them as 1 and 2 alone
    if not head:
        return None
    while len(head) < HEADER.size:
        head += sock.recv(HEADER.size - len(head))
    (size,) = HEADER.unpack(head)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body), fds


def spawn_step(argv: list[str], env: dict[str, str], out_w: int, err_w: int) -> int:
    """A step's command in a new session (its own process group), stdin from /dev/null,
    stdout and stderr to the pipes; the runner spawns a step of its own user the same way."""
    return os.posix_spawn(
        argv[0],
        argv,
        env,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ],
        setsid=True,
        # What Python ignores, the command gets back (as subprocess does).
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
    )


def spawn(request: dict, fds: list[int]) -> bytes:
    """The answer to a spawn request: b"S" and the pid, or b"X" and why not."""
    try:
        out_w, err_w = fds
        pid = spawn_in(request.get("cwd"), request["argv"], request["env"], out_w, err_w)
    except OSError as exc:
        return RECORD.pack(b"X", 0, exc.errno or errno.EIO)
    except (ValueError, TypeError, KeyError):  # a malformed request
        return RECORD.pack(b"X", 0, errno.EINVAL)
    finally:
        for fd in fds:
            os.close(fd)
    return RECORD.pack(b"S", pid, 0)


def spawn_in(cwd: str | None, argv: list[str], env: dict[str, str], out_w: int, err_w: int) -> int:
    """spawn_step in ``cwd``, made now as the step user (a fresh directory, or an error):
    posix_spawn has no chdir, and this process is single-threaded, so it goes there itself
    and back to / at once (never holding a directory that is about to be removed)."""
    if cwd is None:
        return spawn_step(argv, env, out_w, err_w)
    os.mkdir(cwd, 0o700)
    os.chdir(cwd)
    try:
        return spawn_step(argv, env, out_w, err_w)
    finally:
        os.chdir("/")


def terminate(request: dict, steps: Steps) -> None:
    """A step's timeout or cancel: ``signal`` (SIGTERM) to every process of the uid, and a
    ``grace`` before ``ended`` SIGKILLs what is left. Not for a step already reported: the
    signal would reach the next one."""
    pid = request["pid"]
    if pid in steps and steps[pid] is None:
        kill_all(int(request["signal"]))
        steps[pid] = time.monotonic() + float(request["grace"])


def ended(pid: int, steps: Steps, sweep: bool, tidy: Callable[[], None] | None = None) -> int:
    """The exit code of step ``pid``, which has ended, once what it left is killed and
    reaped, and ``tidy`` has removed the files it left."""
    grace_until = steps.pop(pid)
    if not sweep or steps:  # a uid others may share, or (never so far) another step runs
        # A zombie keeps its group id: what the step left running in its group dies first.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    _, status = os.waitpid(pid, 0)
    if grace_until is not None:  # SIGTERMed: they may end by themselves until then
        reap_children(grace_until)
    kill_all(signal.SIGKILL)
    reap_children(time.monotonic() + SWEEP_WAIT)
    if tidy is not None:
        tidy()
    return os.waitstatus_to_exitcode(status)


def serve(sock: socket.socket, sweep: bool, tidy: Callable[[], None] | None = None) -> None:
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, None)
    steps: Steps = {}
    while True:
        for key, _ in sel.select():
            if key.data is not None:  # a step ended
                sel.unregister(key.fd)
                os.close(key.fd)
                sock.sendall(RECORD.pack(b"E", key.data, ended(key.data, steps, sweep, tidy)))
                continue
            got = read_request(sock)
            if got is None:
                return
            request, fds = got
            if isinstance(request, dict) and "signal" in request:
                for fd in fds:
                    os.close(fd)
                if sweep:  # never by uid where others may share it
                    with contextlib.suppress(ValueError, TypeError, KeyError):
                        terminate(request, steps)
                continue
            answer = spawn(request, fds)
            kind, pid, _ = RECORD.unpack(answer)
            if kind == b"S":
                sel.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
                steps[pid] = None
            sock.sendall(answer)


def sibling(name: str) -> ModuleType:
    """The module ``name`` beside this file, loaded by its path: run as a script with -I,
    nothing of Heddle's is on sys.path (standard library only, as this one)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"heddle_launcher_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    uid, gid, sweep = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:] == ["sweep"]
    # Loaded before the switch: the step user may not read the interpreter's library.
    leftovers = sibling("leftovers") if sweep else None
    drop_to(uid, gid, sweep)
    tidy = None
    if leftovers is not None:  # what a lost launcher's steps left: the uid is the runner's alone
        kill_all(signal.SIGKILL)
        tidy = leftovers.TempSweep(uid).sweep
        tidy()
    os.set_inheritable(3, False)  # no step may hold the socket
    sock = socket.socket(fileno=3)
    try:
        sock.sendall(RECORD.pack(b"R", os.getpid(), os.getuid()))
        serve(sock, sweep, tidy)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the runner is gone
    finally:
        if sweep:  # nothing of its steps outlives the runner's launcher
            kill_all(signal.SIGKILL)
            reap_children(time.monotonic() + SWEEP_WAIT)
        if tidy is not None:
            tidy()


if __name__ == "__main__":
    main()
