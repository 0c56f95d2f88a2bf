"""The step-isolation attacks, run against `heddle up` itself as root, with the real default
step user settings (no HEDDLE_STEP_USER): each runner runs its steps as a uid of its own.

Two runs on two runners at once: X's step goes for Y's (its environment, its outputs file, a
SIGSTOP, a ptrace attach) and is refused each time. One runner, as in a pod: what run X's step
left running (a new session, a double-forked daemon) is gone before run Y's step starts.
Everything goes through the HTTP API with the token `heddle up` keeps in its data dir; what
is asserted is what the steps saw and what the test sees in /proc, never a log line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from heddle.services.local.embedded_nats import free_port

from tests.conftest import FAST
from tests.stack import REPO, TERMINAL_RUN, step_of, until
from tests.test_step_uids import AS_ROOT, own_step_uids, shared_dir
from tests.test_up import wait_http

pytestmark = AS_ROOT

# The step uids. own_step_uids() gives each xdist worker ten uids of its own (61100 + 10 * N,
# above the default range 60600-61099 that `make up`, the bench's blocks and the containers
# use, below systemd's dynamic users from 61184), so no other worker's test has them. A
# worker runs one test at a time, and its other tests take offsets 0-2 (runner-0 to runner-2
# of tests/test_up.py, tests/test_up_files.py, tests/test_step_uids.py and
# tests/test_step_leftovers.py) and 9 (the second runner of tests/test_step_uids.py): these
# take 5-6 (two runners) and 7 (one), which nothing else uses, so a runner an earlier test
# left dying (its lock on a uid still held) or any process of one cannot be taken for ours.
BLOCK = int(own_step_uids().split("-")[0])
PAIR = range(BLOCK + 5, BLOCK + 7)  # runner-0, runner-1
SOLO = range(BLOCK + 7, BLOCK + 8)  # runner-0
# The test stacks' short intervals, but not their HEDDLE_STEP_USER=none: the defaults are
# the point.
SETTINGS = {k: v for k, v in FAST.items() if k != "HEDDLE_STEP_USER"}
UP_READY = 60.0  # seconds: five Python processes and a nats-server on a loaded 2-core machine
RUN_DONE = 60.0
STOPPED = 60.0


def processes_of(uids: range) -> dict[int, tuple[int, str]]:
    """Every process (a zombie too) any of whose uids is in ``uids``: its pid, to that uid
    and its command."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:  # ended meanwhile
            continue
        ids = next(x for x in status.splitlines() if x.startswith("Uid:")).split()[1:]
        if ours := [int(i) for i in ids if int(i) in uids]:
            found[int(entry)] = (ours[0], command.decode(errors="replace"))
    return found


def sleeping(pid: int) -> bool:
    """Whether ``pid`` is one of the ``sleep 300`` a step left (not a pid used again)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00300\x00"
    except OSError:
        return False


def step_python(uid: int) -> str:
    """A Python the step uids may run (a Python under /root, say, they may not): for the
    ptrace attempt through ctypes. The first that runs as a step uid, tried for real."""
    candidates = [os.path.realpath(sys.executable), shutil.which("python3") or ""]
    candidates += ["/usr/bin/python3", "/usr/local/bin/python3"]
    for python in dict.fromkeys(os.path.realpath(c) for c in candidates if c):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            tried = subprocess.run(
                [python, "-I", "-S", "-c", "import ctypes"],
                user=uid,
                group=uid,
                extra_groups=[],
                cwd="/",
                capture_output=True,
                timeout=30,
            )
            if tried.returncode == 0:
                return python
    pytest.fail(f"no Python a step uid may run among {candidates}: no ptrace attempt")


@dataclass
class Up:
    """A `heddle up` this test started, and the API it serves."""

    proc: subprocess.Popen
    data: Path
    output: Path
    http: aiohttp.ClientSession
    base: str

    def said(self) -> str:
        """The end of what it printed, to show with a failure (never asserted)."""
        return self.output.read_text(errors="replace")[-4000:]

    async def submit(self, doc: dict[str, Any]) -> str:
        async with self.http.post(f"{self.base}/api/runs", json=doc) as resp:
            body = await resp.json()
            # 202: taken, but not yet stored by the orchestrator (one still starting).
            assert resp.status in (201, 202), (resp.status, body)
            return body["runId"]

    async def wait_run(self, run_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + RUN_DONE
        while True:
            async with self.http.get(f"{self.base}/api/runs/{run_id}") as resp:
                body = await resp.json()
            if resp.status == 200 and body.get("status") in TERMINAL_RUN:
                return body
            assert time.monotonic() < deadline, f"run {run_id}: {body}\n{self.said()}"
            await asyncio.sleep(0.05)

    async def logs(self, run_id: str, step: str) -> str:
        async with self.http.get(f"{self.base}/api/runs/{run_id}/steps/{step}/logs") as resp:
            assert resp.status == 200, resp.status
            return await resp.text()


@contextlib.asynccontextmanager
async def heddle_up(tmp_path: Path, runners: int, uids: range) -> AsyncIterator[Up]:
    """`heddle up --runners N` as root with HEDDLE_STEP_UIDS ``uids``, in a data dir of its
    own on free ports, until the pool shows every runner; SIGTERMed (by its pid) at the end,
    which must stop it cleanly and leave no process of ``uids``."""
    assert not processes_of(uids), processes_of(uids)  # none before: every one after is its
    data, output = tmp_path / "data", tmp_path / "up.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
    env |= {**SETTINGS, "PYTHONPATH": str(REPO), "HEDDLE_STEP_UIDS": f"{uids[0]}-{uids[-1]}"}
    argv = [sys.executable, "-m", "heddle.services.cli", "up", "--runners", str(runners)]
    argv += ["--port", str(free_port()), "--nats-port", str(free_port()), "--data-dir", str(data)]
    with output.open("wb") as out:  # a file, not a pipe no one reads while the test runs
        proc = subprocess.Popen(
            argv, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + UP_READY
        while not (data / "url").exists():  # written before the services start
            assert proc.poll() is None, output.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, output.read_text(errors="replace")[-4000:]
            await asyncio.sleep(0.05)
        base = (data / "url").read_text().strip()
        await wait_http(f"{base}/api/runners", data / "admin-token", runners, UP_READY)
        # Each runner holds its uid, as its step launcher's: what the scan at the end would
        # see of them, were they left.
        in_use = lambda: {uid for uid, _ in processes_of(uids).values()} == set(uids)  # noqa: E731
        await until(in_use, UP_READY, f"not each its own: {processes_of(uids)}")
        token = (data / "admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            yield Up(proc, data, output, http, base)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.get_running_loop().run_in_executor(None, proc.wait, STOPPED)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    said = output.read_text(errors="replace")[-4000:]
    assert proc.returncode == 0, said
    # Stopped, it left nothing of its steps' uids: not a step, not a launcher. (Reaping the
    # last may take a moment: waited for, bounded.)
    await until(lambda: not processes_of(uids), 10, f"{processes_of(uids)}\n{said}")


def script(text: str, **values: object) -> str:
    """A shell script with each @NAME@ replaced (the scripts are full of braces and $)."""
    for name, value in values.items():
        text = text.replace(f"@{name}@", str(value))
    assert "@" not in text, text
    return text


# --- two runs on two runners at once -----------------------------------------------------------

# Y's step: says where its outputs go (world-readable, for the test's sake: X is to be refused
# the file even knowing its path) and its pid, then runs until X's step is done. It holds a
# secret in its env and a parameter, neither in its command (/proc/<pid>/cmdline is anyone's).
Y = """
umask 022
echo "$HEDDLE_OUTPUTS" > @D@/y.outputs.tmp && mv @D@/y.outputs.tmp @D@/y.outputs
echo $$ > @D@/y.pid.tmp && mv @D@/y.pid.tmp @D@/y.pid
i=0; while [ ! -e @D@/x.done ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
[ -n "$Y_SECRET" ] && echo secret=held >> "$HEDDLE_OUTPUTS"
[ -n "$HEDDLE_PARAM_KEY" ] && echo param=held >> "$HEDDLE_OUTPUTS"
echo "uid=$(id -u)" >> "$HEDDLE_OUTPUTS"
"""
# ptrace(PTRACE_ATTACH), and if it was let in, a wait for the stop and a detach (Y goes on).
PTRACE = """
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
pid = int(sys.argv[1])
if libc.ptrace(16, pid, None, None) == 0:
    os.waitpid(pid, 0x40000000)
    libc.ptrace(17, pid, None, None)
    print("attached")
else:
    print("denied", errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
"""
# X's step, on the other runner, meanwhile: Y's environment (its secret, its parameter, its
# outputs' path), a line in Y's outputs, Y's memory, a SIGSTOP (undone if it worked, so Y
# ends either way), a ptrace attach. What it got it keeps in the shared directory and its
# output, where the test looks for Y's secrets.
X = """
umask 022
trap 'touch @D@/x.done' EXIT
p=$(cat @D@/y.pid)
if (tr '\\0' '\\n' < /proc/$p/environ > @D@/x.environ) 2> @D@/x.environ.err; then
  r=read; else r=denied; fi
cat @D@/x.environ
o=$(sed -n 's/^HEDDLE_OUTPUTS=//p' @D@/x.environ)
[ -n "$o" ] || o=$(cat @D@/y.outputs)
if (echo hijacked=1 >> "$o") 2> @D@/x.append.err; then a=appended; else a=denied; fi
if (: < /proc/$p/mem) 2> @D@/x.mem.err; then m=opened; else m=denied; fi
if kill -STOP $p 2> @D@/x.stop.err; then s=stopped; kill -CONT $p; else s=denied; fi
@PYTHON@ -I -S -c '@PTRACE@' $p > @D@/x.ptrace 2>&1
t=$(cut -d' ' -f1 @D@/x.ptrace)
printf 'environ=%s\\nappend=%s\\nmem=%s\\nstop=%s\\nptrace=%s\\nuid=%s\\n' \
  $r $a $m $s "$t" $(id -u) >> "$HEDDLE_OUTPUTS"
"""


async def test_two_runs_on_two_runners_cannot_reach_each_other(tmp_path: Path) -> None:
    d = shared_dir()
    secret, key = f"y-secret-{uuid.uuid4().hex}", f"y-param-{uuid.uuid4().hex}"
    python = step_python(PAIR[0])
    try:
        async with heddle_up(tmp_path, 2, PAIR) as up:
            y_doc = {
                "steps": [{"id": "y", "command": script(Y, D=d), "env": {"Y_SECRET": secret}}],
                "params": {"key": key},
            }
            y_id = await up.submit(y_doc)
            ready = lambda: (d / "y.pid").exists() and (d / "y.outputs").exists()  # noqa: E731
            await until(ready, RUN_DONE, f"Y's step never started\n{up.said()}")
            x_command = script(X, D=d, PYTHON=python, PTRACE=PTRACE.strip())
            x_id = await up.submit({"steps": [{"id": "x", "command": x_command}]})
            x_run, y_run = await up.wait_run(x_id), await up.wait_run(y_id)
            x, y = step_of(x_run, "x"), step_of(y_run, "y")
            x_logs = await up.logs(x_id, "x")
        seen = {f.name: f.read_text(errors="replace") for f in d.iterdir()}
        # Both through, on the two runners at once, each as its own uid of HEDDLE_STEP_UIDS.
        uids = sorted(int(step.get("outputs", {}).get("uid", -1)) for step in (x, y))
        assert (x["status"], y["status"], uids) == ("succeeded", "succeeded", list(PAIR)), (
            x,
            y,
            seen,
        )
        x_uid, y_uid = int(x["outputs"]["uid"]), int(y["outputs"]["uid"])
        # Every attack refused, by the kernel: X is another uid, without a capability.
        expected = dict.fromkeys(("environ", "append", "mem", "stop", "ptrace"), "denied")
        assert x["outputs"] == {**expected, "uid": str(x_uid)}, (x["outputs"], seen)
        assert "Permission denied" in seen["x.environ.err"], seen
        assert "Permission denied" in seen["x.append.err"], seen
        assert "Permission denied" in seen["x.mem.err"], seen
        assert "not permitted" in seen["x.stop.err"], seen  # EPERM
        assert seen["x.ptrace"].split() == ["denied", "EPERM"], seen
        # Y ran through, with its own outputs only: no line of X's among them.
        assert y["outputs"] == {"secret": "held", "param": "held", "uid": str(y_uid)}, y
        # Neither of Y's secrets anywhere X could keep it: its files, its output, its run.
        for value in (secret, key):
            assert not [name for name, text in seen.items() if value in text], seen
            assert value not in json.dumps(x_run), x_run
            assert value not in x_logs
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --- one runner: what a step leaves -----------------------------------------------------------

# X's step leaves two processes that hide from its process group: one in a session of its own,
# and a daemon (forked twice, its parent gone: in a session of its own, no child of the shell).
LEAVE = """
umask 022
setsid sh -c 'echo $$ > @D@/setsid.pid; exec sleep 300' &
(setsid sh -c 'echo $$ > @D@/daemon.pid; exec sleep 300' &)
while [ ! -s @D@/setsid.pid ] || [ ! -s @D@/daemon.pid ]; do sleep 0.02; done
echo "uid=$(id -u)" >> "$HEDDLE_OUTPUTS"
"""
# Y's step, next on the same runner: is any of them alive (its pid a `sleep 300` still)?
LOOK = """
alive=""
for f in @D@/*.pid; do
  p=$(cat $f)
  [ "$(tr '\\0' ' ' < /proc/$p/cmdline 2> /dev/null)" = "sleep 300 " ] && alive="$alive,$p"
done
printf 'alive=%s\\nuid=%s\\n' "${alive#,}" $(id -u) >> "$HEDDLE_OUTPUTS"
"""


async def test_what_run_x_s_step_left_is_gone_before_run_y_s_step_starts(
    tmp_path: Path,
) -> None:
    d = shared_dir()
    pids: list[int] = []
    try:
        async with heddle_up(tmp_path, 1, SOLO) as up:
            x_run = await up.wait_run(
                await up.submit({"steps": [{"id": "x", "command": script(LEAVE, D=d)}]})
            )
            pids = [int((d / f"{name}.pid").read_text()) for name in ("setsid", "daemon")]
            # Killed before X's outcome was told: gone already, no wait.
            still = [pid for pid in pids if sleeping(pid)]
            y_run = await up.wait_run(
                await up.submit({"steps": [{"id": "y", "command": script(LOOK, D=d)}]})
            )
        x, y = step_of(x_run, "x"), step_of(y_run, "y")
        # Both through, one after the other on the one runner, as its uid.
        ran = [(s["status"], s.get("outputs", {}).get("uid")) for s in (x, y)]
        assert ran == [("succeeded", str(SOLO[0]))] * 2, (x, y)
        assert not still, f"left by X's step, alive when its run ended: {still}"
        assert y["outputs"]["alive"] == "", f"alive when Y's step started: {y['outputs']}"
        assert not [pid for pid in pids if sleeping(pid)]
    finally:
        for pid in pids:  # were isolation off, they would live on: ended here, by their pid
            if sleeping(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(d, ignore_errors=True)
