"""One step's command as a process group: spawn, stream output, time out, kill.

The command runs as ``/bin/sh -c`` in a new session, so it and everything it starts share one
process group. Killing is always of the whole group: SIGTERM, then SIGKILL after a grace.
When the shell exits, whatever it left running in the background is killed too: a step's
processes do not outlive the step.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from shared.contracts import Outcome

READ_CHUNK = 64 * 1024
# After the shell exits, output still in the pipes is read for at most this long.
DRAIN_TIMEOUT = 2.0

OutputSink = Callable[[str, bytes], Awaitable[None]]  # (stream name, raw bytes as read)


@dataclass(frozen=True, slots=True)
class ProcessResult:
    outcome: Outcome
    exit_code: int | None
    reason: str | None
    stdout_tail: str
    stderr_tail: str


class Tail:
    """The last ``limit`` bytes written to a stream."""

    __slots__ = ("buf", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()

    def add(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > 2 * self.limit:
            del self.buf[: len(self.buf) - self.limit]

    def text(self) -> str:
        data = bytes(self.buf[-self.limit :]) if self.limit else b""
        return data.decode("utf-8", errors="replace").rstrip("\n")


def kill_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class StepProcess:
    def __init__(
        self,
        command: str,
        env: dict[str, str],
        timeout: float,
        kill_grace: float,
        tail_bytes: int,
        sink: OutputSink | None = None,
    ) -> None:
        self.command = command
        self.env = env
        self.timeout = timeout
        self.kill_grace = kill_grace
        self.sink = sink
        self.tails = {"stdout": Tail(tail_bytes), "stderr": Tail(tail_bytes)}
        self.proc: asyncio.subprocess.Process | None = None
        self._kill_reason: tuple[Outcome, str] | None = None
        self._killer: asyncio.Task | None = None
        self.started = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    async def run(self) -> ProcessResult:
        self.proc = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            self.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        self.started.set()
        readers = [
            asyncio.create_task(self._read("stdout", self.proc.stdout)),
            asyncio.create_task(self._read("stderr", self.proc.stderr)),
        ]
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), self.timeout)
        except TimeoutError:
            self.kill("timed_out", f"timed out after {self.timeout:g} s")
            await self.proc.wait()
        # Background children die with the step; this also closes the pipes they held.
        kill_group(self.proc.pid, signal.SIGKILL)
        await asyncio.wait(readers, timeout=DRAIN_TIMEOUT)
        for reader in readers:
            reader.cancel()
        if self._killer:
            self._killer.cancel()
        code = self.proc.returncode
        stdout, stderr = self.tails["stdout"].text(), self.tails["stderr"].text()
        if self._kill_reason:
            outcome, reason = self._kill_reason
            return ProcessResult(outcome, code, reason, stdout, stderr)
        if code == 0:
            return ProcessResult("succeeded", 0, None, stdout, stderr)
        reason = (
            f"exit code {code}"
            if code is not None and code >= 0
            else f"killed by signal {-code}"
            if code is not None
            else "no exit code"
        )
        return ProcessResult("failed", code, reason, stdout, stderr)

    def kill(self, outcome: Outcome, reason: str) -> None:
        """SIGTERM the group now, SIGKILL it after the grace. The first reason given wins."""
        if self._kill_reason is not None or self.proc is None:
            return
        self._kill_reason = (outcome, reason)
        kill_group(self.proc.pid, signal.SIGTERM)
        self._killer = asyncio.create_task(self._kill_after_grace(self.proc.pid))

    async def _kill_after_grace(self, pgid: int) -> None:
        await asyncio.sleep(self.kill_grace)
        kill_group(pgid, signal.SIGKILL)

    async def _read(self, name: str, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        tail = self.tails[name]
        sink = self.sink
        while True:
            data = await stream.read(READ_CHUNK)
            if not data:
                return
            tail.add(data)
            if sink is not None:
                await sink(name, data)


def step_env(base: dict[str, str], run_id: str, step_id: str, attempt: int) -> dict[str, str]:
    env = dict(base)
    env.update(HEDDLE_RUN_ID=run_id, HEDDLE_STEP_ID=step_id, HEDDLE_ATTEMPT=str(attempt))
    return env


def use_pidfd_child_watcher() -> None:
    """Reap children through pidfds rather than a thread per child: faster spawning, and no
    thread with a timed wait (those hang under faketime). Python 3.12+ does this itself."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
