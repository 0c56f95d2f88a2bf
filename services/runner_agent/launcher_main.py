"""The step launcher: a small process that runs as the step user and spawns each step.

Started by the runner (services/runner_agent/launcher.py) as root with an empty environment
and the runner's end of a socket pair as fd 3, it drops to the step user's ids for good,
then serves requests: each a spawn of ``/bin/sh -c`` in a new session with the two pipes
that came with it, answered with the pid; and reports each step's exit status once it has
killed what the step left in its process group and reaped it. One ``posix_spawn`` (a vfork)
per step: dropping the ids in each step's own process would cost a fork of the runner or a
second exec.

Standard library only, run with ``python -I -S``: it imports nothing of Heddle's, reads no
environment and holds no credential. It is non-dumpable, so a step (same uid) can signal it
but neither trace it nor take its socket. On end of file (the runner gone) it exits.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import selectors
import signal
import socket
import struct
import sys

# kind, pid, value: b"R" ready (its uid), b"S" spawned, b"X" not (errno), b"E" exit code
RECORD = struct.Struct("!cii")
HEADER = struct.Struct("!I")  # the request's length; the two pipes come with its first byte
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4


def drop_to(uid: int, gid: int) -> None:
    """The step user's ids, for good (a launcher that is not root runs as itself)."""
    if os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # cleared by the id change


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


def spawn(request: dict, fds: list[int]) -> int:
    out_w, err_w = fds
    try:
        return spawn_step(request["argv"], request["env"], out_w, err_w)
    finally:
        os.close(out_w)
        os.close(err_w)


def serve(sock: socket.socket) -> None:
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, None)
    while True:
        for key, _ in sel.select():
            if key.data is None:
                got = read_request(sock)
                if got is None:
                    return
                try:
                    pid = spawn(*got)
                except OSError as exc:
                    sock.sendall(RECORD.pack(b"X", 0, exc.errno or errno.EIO))
                    continue
                except (ValueError, TypeError, KeyError):  # a malformed request
                    sock.sendall(RECORD.pack(b"X", 0, errno.EINVAL))
                    continue
                sel.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
                sock.sendall(RECORD.pack(b"S", pid, 0))
            else:
                pid = key.data
                sel.unregister(key.fd)
                os.close(key.fd)
                # A zombie keeps its group id: what the step left running dies first.
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                _, status = os.waitpid(pid, 0)
                sock.sendall(RECORD.pack(b"E", pid, os.waitstatus_to_exitcode(status)))


def main() -> None:
    uid, gid = int(sys.argv[1]), int(sys.argv[2])
    drop_to(uid, gid)
    os.set_inheritable(3, False)  # no step may hold the socket
    sock = socket.socket(fileno=3)
    try:
        sock.sendall(RECORD.pack(b"R", os.getpid(), os.getuid()))
        serve(sock)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the runner is gone


if __name__ == "__main__":
    main()
