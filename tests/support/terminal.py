"""The command line with its output on a pseudo-terminal, or on a pipe, and what a step may
try to write to that terminal."""

from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import sys
import termios
from pathlib import Path

from tests.support.stack import REPO

PWNED = r"\033]0;pwned\007\033]52;c;cHduZWQ=\007"  # a window title, then the clipboard
RAW = b"\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07"
SHOWN = b"^[]0;pwned^G^[]52;c;cHduZWQ=^G"


def read_to_end(fd: int) -> bytes:
    """Everything written to a pty's other end, until every writer has closed it."""
    data = bytearray()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: no process holds the terminal's end any more
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def open_terminal(columns: int = 200) -> tuple[int, int]:
    """A pseudo-terminal (master, slave), wide enough that no line of the tests wraps."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    return master, slave


def cli_env(**more: str) -> dict[str, str]:
    """No HEDDLE_* variable but those given; this checkout's code, whatever is installed."""
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **more}


async def heddle(
    *args: str, terminal: bool, cwd: Path = REPO, env: dict[str, str] | None = None
) -> tuple[int, bytes, str]:
    """The CLI with its stdout on a pseudo-terminal, or on a pipe."""
    master, slave = open_terminal() if terminal else (None, None)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "heddle.services.cli",
            *args,
            cwd=cwd,
            env=cli_env(**(env or {})),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=slave if terminal else asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    finally:
        if slave is not None:
            os.close(slave)
    if master is None:
        out, err = await proc.communicate()
    else:
        try:
            reading = asyncio.get_running_loop().run_in_executor(None, read_to_end, master)
            _, err = await proc.communicate()
            out = await reading
        finally:
            os.close(master)
    assert proc.returncode is not None
    return proc.returncode, out, err.decode()
