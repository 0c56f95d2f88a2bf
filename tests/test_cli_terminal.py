"""A step cannot write the user's terminal through the command line: where step-made text is
printed on a terminal, its control characters are shown as `cat -v` shows them; `--raw` and
a pipe get the bytes the step wrote. The escaping itself is checked against `cat -v`."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import os
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

from heddle.services.cli import watch
from heddle.services.cli.terminal import for_output, visible
from rich.console import Console

from tests.conftest import StackFactory
from tests.stack import REPO

PWNED = r"\033]0;pwned\007\033]52;c;cHduZWQ=\007"  # a window title, then the clipboard
RAW = b"\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07"
SHOWN = b"^[]0;pwned^G^[]52;c;cHduZWQ=^G"
TABLE = {
    "\x1b": "^[",
    "\x07": "^G",
    "\x00": "^@",
    "\x08": "^H",
    "\r": "^M",
    "\x1f": "^_",
    "\x7f": "^?",
    "\x80": "M-^@",
    "\x9b": "M-^[",  # CSI on its own
    "\x9d": "M-^]",  # OSC on its own
    "\x9f": "M-^_",
    "\n": "\n",
    "\t": "\t",
    " ~": " ~",
    "\xa0é中😀\ufffd": "\xa0é中😀\ufffd",  # printable beyond ASCII stays as it is
    "a\x1b[2Jb\x1b]8;;http://x\x1b\\c": "a^[[2Jb^[]8;;http://x^[\\c",
}


def cat_v(codes: list[int]) -> list[str]:
    """What `cat -v` prints for each byte of ``codes`` (none of them a newline)."""
    given = b"\n".join(bytes([code]) for code in codes)
    done = subprocess.run(["cat", "-v"], input=given, capture_output=True, check=True)
    return done.stdout.decode("ascii").split("\n")


def test_control_characters_are_shown_as_cat_v_shows_them() -> None:
    for text, shown in TABLE.items():
        assert visible(text) == shown, repr(text)
    assert visible(PWNED.encode().decode("unicode_escape")) == SHOWN.decode()
    # Every C0 control, DEL and every C1 control as cat -v shows the byte of that value;
    # newline and tab kept; printable characters unchanged.
    codes = [code for code in range(0xA0) if code != 0x0A]
    for code, expected in zip(codes, cat_v(codes), strict=True):
        assert visible(chr(code)) == expected, hex(code)
    assert visible("\n") == "\n"
    for code in (*range(0x20, 0x7F), *range(0xA0, 0x800)):
        assert visible(chr(code)) == chr(code), hex(code)


def test_only_a_terminal_gets_the_escaped_form() -> None:
    text = RAW.decode()
    master, slave = os.openpty()
    read_end, write_end = os.pipe()
    with open(slave, "w") as tty, open(write_end, "w") as pipe:
        assert for_output(text, tty) == SHOWN.decode()
        assert for_output(text, tty, raw=True) == text
        assert for_output(text, pipe) == text
        assert for_output(text, io.StringIO()) == text
    os.close(master)
    os.close(read_end)


def failed_run(reason: str) -> dict[str, Any]:
    step = {"id": "s", "status": "failed", "attempt": 1, "reason": reason}
    step |= {"startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}
    times = {"createdAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}
    return {"runId": "r", "status": "failed", "steps": [step], **times}


def test_the_live_view_shows_a_reason_escaped() -> None:
    """rich passes ESC through (it drops BEL alone): the view escapes first."""
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    sink = watch.LiveSink(console)
    run = failed_run(RAW.decode())
    sink.update(run)
    sink.close(run)
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b]" not in shown and "\x07" not in shown
    assert SHOWN.decode() in shown


# ---- through a real stack ------------------------------------------------------------------


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


async def test_a_step_escape_sequences_reach_a_terminal_escaped(stack: StackFactory) -> None:
    s = await stack(runners=1)
    env = {"HEDDLE_URL": s.base, "HEDDLE_TOKEN": s.admin_token}
    command = f"printf '{PWNED}\\n'; echo done; exit 3"
    run_id = await s.submit({"runId": "pwn", "steps": [{"id": "p", "command": command}]})
    assert (await s.wait_run(run_id))["status"] == "failed"

    for args in (("logs", "pwn", "p"), ("logs", "pwn", "p", "-f")):
        rc, out, err = await heddle(*args, terminal=True, env=env)
        assert rc == 0, err
        assert b"\x1b" not in out and b"\x07" not in out, (args, out)
        assert SHOWN in out and b"done" in out, (args, out)
        # A pipe, and --raw on a terminal, get what the step wrote.
        rc, out, err = await heddle(*args, terminal=False, env=env)
        assert rc == 0 and RAW + b"\n" in out, (args, out, err)
        rc, out, err = await heddle(*args, "--raw", terminal=True, env=env)
        assert rc == 0 and RAW in out, (args, out, err)

    # JSON on a terminal: JSON's own escapes, the text unchanged once decoded.
    rc, out, err = await heddle("logs", "pwn", "p", "--json", terminal=True, env=env)
    assert rc == 0 and b"\x1b" not in out, err
    texts = [line["text"] for line in json.loads(out)["lines"]]
    assert RAW.decode() in texts

    # The views a terminal gets of the run: nothing a step wrote is obeyed.
    for args in (("status", "pwn"), ("watch", "pwn")):
        rc, out, err = await heddle(*args, terminal=True, env=env)
        assert rc == (0 if args[0] == "status" else 1), (args, err)
        assert b"\x1b]" not in out and b"\x07" not in out, (args, out)
        assert b"exit code 3" in out, (args, out)
