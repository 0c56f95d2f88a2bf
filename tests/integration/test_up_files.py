"""What `heddle up` keeps in its data dir, and where the command line finds the gateway.

Every file there is the owner's alone (0600, in 0700 directories), the store's too; the admin
token is printed on a terminal only (output sent to a file could be read by a step); the
gateway's address is in `.heddle/url` beside the token, and the command line has no fixed
address to fall back on: a step listening there would be sent the token."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from heddle.services.local.embedded_nats import free_port
from heddle.services.local.supervisor import Child, Supervisor

from tests.support.stack import REPO
from tests.support.step_uids import own_step_uids
from tests.support.terminal import PWNED, RAW, SHOWN, heddle, open_terminal

FLOW = {"steps": [{"id": "a", "command": "echo hello"}, {"id": "b", "command": "echo bye"}]}


class Output:
    """What a process writes on the other end of ``fd``, read as it comes (a pipe or a
    pseudo-terminal holds little: a writer nobody reads would block)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = b""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while chunk := read_some(self.fd):
            self.data += chunk

    def text(self) -> str:
        return self.data.decode(errors="replace")

    async def until_said(self, words: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while words not in self.text():
            assert time.monotonic() < deadline, f"never said {words!r}:\n{self.text()[-3000:]}"
            await asyncio.sleep(0.02)

    def close(self) -> None:
        self.reader.join(30)
        os.close(self.fd)


def read_some(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the pseudo-terminal's other end is closed
        return b""


@dataclass
class Up:
    proc: subprocess.Popen
    port: int
    output: Output


def start_up(cwd: Path, terminal: bool) -> Up:
    """`heddle up` in ``cwd`` (its data dir the default, .heddle there), its output on a
    pseudo-terminal or on a pipe."""
    port, nats_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
    env["PYTHONPATH"] = str(REPO)
    # As root, each runner holds a step uid on this machine: a range of this worker's own.
    env["HEDDLE_STEP_UIDS"] = own_step_uids()
    argv = [
        sys.executable,
        "-m",
        "heddle.services.cli",
        "up",
        "--port",
        str(port),
        "--runners",
        "1",
    ]
    argv += ["--nats-port", str(nats_port)]
    ours, theirs = open_terminal() if terminal else os.pipe()
    try:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=theirs, stderr=theirs
        )
    finally:
        os.close(theirs)
    return Up(proc, port, Output(ours))


async def stopped(up: Up) -> str:
    """SIGTERM, and all it said."""
    if up.proc.poll() is None:
        up.proc.send_signal(signal.SIGTERM)
    await asyncio.get_running_loop().run_in_executor(None, up.proc.wait, 60)
    up.output.close()
    text = up.output.text()
    assert up.proc.returncode == 0, text[-3000:]
    return text


def not_private(folder: Path) -> tuple[list[str], int]:
    """What under ``folder`` (itself included) is not the owner's alone, and how many files
    were looked at (the store's change as nats-server writes it)."""
    wrong, files = [], 0
    for parent, dirs, names in os.walk(folder):
        for path in [Path(parent), *(Path(parent) / name for name in names + dirs)]:
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:
                continue  # a store file nats-server removed meanwhile
            files += stat.S_ISREG(mode)
            want = 0o700 if stat.S_ISDIR(mode) else 0o600
            if stat.S_ISLNK(mode) or stat.S_IMODE(mode) != want:
                wrong.append(f"{path.relative_to(folder)}: {oct(stat.S_IMODE(mode))}")
    return wrong, files


async def test_up_keeps_its_files_private_and_the_token_off_a_pipe(tmp_path: Path) -> None:
    data = tmp_path / ".heddle"
    # What an older Heddle left, made under the user's umask; and a file of the user's own.
    (data / "nats").mkdir(parents=True)
    (data / "nats.log").write_text("an older start\n")
    (data / "notes.txt").write_text("mine\n")
    for path, mode in ((data, 0o755), (data / "nats", 0o755), (data / "nats.log", 0o644)):
        path.chmod(mode)
    (data / "notes.txt").chmod(0o644)
    up = start_up(tmp_path, terminal=False)
    try:
        await up.output.until_said("heddle | up: ")
        assert (data / "url").read_text() == f"http://127.0.0.1:{up.port}\n"
        # The command line run there finds the gateway, and the token it sends, by itself.
        (tmp_path / "flow.json").write_text(json.dumps(FLOW))
        rc, out, err = await heddle("submit", "flow.json", "--wait", cwd=tmp_path, terminal=False)
        lines = out.decode().splitlines()
        assert rc == 0 and lines[-1].startswith(f"run {lines[0]} succeeded"), (out, err)
        wrong, files = not_private(data)
        assert wrong == ["notes.txt: 0o644"], wrong  # what is not Heddle's is left alone
        for name in ("admin-token", "url", "nats-users.json", "nats-auth.conf"):
            assert (data / name).is_file(), name
        for name in ("nats-context.json", "nats-server.conf", "nats.log"):
            assert (data / name).is_file(), name
        assert files > 10  # the store's files among them
    finally:
        text = await stopped(up)
    token = (data / "admin-token").read_text().strip()
    assert token not in text
    assert f"API token: {data / 'admin-token'} (" in text
    # Left behind, the address would name a port anyone may listen on next.
    assert not (data / "url").exists()


async def test_up_shows_the_page_with_its_token_on_a_terminal(tmp_path: Path) -> None:
    up = start_up(tmp_path, terminal=True)
    try:
        await up.output.until_said("heddle | open ")
    finally:
        text = await stopped(up)
    token = (tmp_path / ".heddle" / "admin-token").read_text().strip()
    # As Jupyter prints it; the token nowhere else.
    assert f"open http://127.0.0.1:{up.port}/?token={token}" in text
    assert text.count(token) == 1


async def test_up_shows_what_a_service_prints_escaped_on_a_terminal() -> None:
    """A service's output that holds a step's text (a traceback quoting it) is not obeyed by
    the terminal `heddle up` runs in; a pipe gets it as it was."""
    for terminal in (True, False):
        ours, theirs = open_terminal() if terminal else os.pipe()
        output = Output(ours)
        with open(theirs, "w") as out:
            child = Child("svc", ["printf", PWNED + "\\n"], {"PATH": "/usr/bin:/bin"})
            supervisor = Supervisor([child], out=out)
            await supervisor.start()
            await output.until_said("svc | ")
            await supervisor.stop(grace=5)
        output.close()
        if terminal:
            assert b"\x1b" not in output.data and b"\x07" not in output.data, output.data
            assert b"svc | " + SHOWN in output.data
        else:
            assert b"svc | " + RAW + b"\n" in output.data


@contextmanager
def listening() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A real HTTP server on a free port of 127.0.0.1, as a step could run: its address, and
    the headers of every request it was sent (each answered with an empty list of runs)."""
    heard: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            heard.append(dict(self.headers))
            body = json.dumps({"runs": [], "total": 0, "matching": 0, "limit": 20}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", heard
    finally:
        server.shutdown()
        server.server_close()
        serving.join()


async def test_without_an_address_the_cli_sends_nothing_anywhere(tmp_path: Path) -> None:
    data = tmp_path / ".heddle"
    data.mkdir(mode=0o700)
    (data / "admin-token").write_text("hdl_" + "x" * 43 + "\n")
    (data / "admin-token").chmod(0o600)
    with listening() as (address, heard):
        for args in (("runs",), ("token", "list")):
            rc, out, err = await heddle(*args, cwd=tmp_path, terminal=False)
            assert (rc, out) == (2, b""), (args, err)
            assert err.count("\n") == 1 and "--url" in err and "HEDDLE_URL" in err, err
            assert ".heddle/url" in err and "Traceback" not in err, err
        # An address others may write (a step, where it can) is not believed.
        (data / "url").write_text(address + "\n")
        (data / "url").chmod(0o666)
        rc, out, err = await heddle("runs", cwd=tmp_path, terminal=False)
        assert (rc, out) == (2, b"") and "not trusted" in err, err
        assert heard == []
        # The listener does hear a command line told where it is.
        (data / "url").chmod(0o600)
        rc, out, err = await heddle("runs", cwd=tmp_path, terminal=False)
        assert rc == 0, err
        assert [h.get("Authorization") for h in heard] == ["Bearer hdl_" + "x" * 43]
