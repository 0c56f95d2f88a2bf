"""`heddle up`'s processes: each started, its output prefixed with its name, started again
when it crashes, and all stopped together (SIGTERM, then SIGKILL after a grace). On a
terminal, a control character in their output (a step's text in a traceback) is shown as
``cat -v`` shows it, not obeyed."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import dataclass

from heddle.services.cli.terminal import is_terminal, visible
from heddle.shared.runtime.tasks import cancel_and_wait

RESTART_DELAY = 1.0
READ_CHUNK = 64 * 1024  # what one read of a child's output takes, every line in it relayed at once
LINE_MAX = 64 * 1024  # a longer line is relayed in parts of this size


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    proc: asyncio.subprocess.Process | None = None
    pump: asyncio.Task | None = None
    spawning: asyncio.Task | None = None  # its start (or restart) under way, if any
    restarts: int = 0


class Supervisor:
    def __init__(
        self, children: list[Child], out=sys.stdout, restart_delay: float = RESTART_DELAY
    ) -> None:
        self.children = children
        self.restart_delay = restart_delay
        self.out = out
        self.stopping = False
        self.width = max(len(c.name) for c in children)
        self.on_terminal = is_terminal(out)

    def say(self, name: str, line: str) -> None:
        self.say_lines(name, [line])

    def say_lines(self, name: str, lines: list[str]) -> None:
        """``lines`` of ``name``'s, each prefixed with it, in one write."""
        shown = [visible(line) for line in lines] if self.on_terminal else lines
        self.out.write("".join(f"{name:>{self.width}} | {line}\n" for line in shown))
        self.out.flush()

    async def _spawn(self, child: Child) -> None:
        # A task of its own, shielded: a stop waits for it to finish, then stops what it started.
        child.spawning = asyncio.ensure_future(self._exec(child))
        await asyncio.shield(child.spawning)

    async def _exec(self, child: Child) -> None:
        child.proc = await asyncio.create_subprocess_exec(
            *child.argv,
            env=child.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
        child.pump = asyncio.create_task(self._pump(child, child.proc))

    async def _pump(self, child: Child, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        # A read at a time, not a line: a line past any reader's limit is passed on in
        # parts, where a line reader would stop, and the child block on a full pipe.
        rest = b""
        while chunk := await proc.stdout.read(READ_CHUNK):
            *lines, rest = (rest + chunk).split(b"\n")
            while len(rest) > LINE_MAX:  # no end of line in sight: passed on in parts
                lines.append(rest[:LINE_MAX])
                rest = rest[LINE_MAX:]
            if lines:
                self.say_lines(child.name, [line.decode(errors="replace") for line in lines])
        if rest:  # its last line, with no end of line
            self.say(child.name, rest.decode(errors="replace"))
        code = await proc.wait()
        if not self.stopping:
            child.restarts += 1
            self.say(child.name, f"exited with {code}; restarting in {self.restart_delay:g}s")
            await asyncio.sleep(self.restart_delay)
            if not self.stopping:
                await self._spawn(child)

    async def start(self) -> None:
        for child in self.children:
            await self._spawn(child)

    async def stop(self, grace: float) -> None:
        self.stopping = True  # no restart begins from here on; one under way is waited for
        spawns = [c.spawning for c in self.children if c.spawning and not c.spawning.done()]
        if spawns:
            await asyncio.wait(spawns)
        procs = [c.proc for c in self.children if c.proc and c.proc.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        waits = [asyncio.create_task(p.wait()) for p in procs]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=grace)
            for proc in procs:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            if pending:
                await asyncio.wait(pending, timeout=5)
        await cancel_and_wait(*(c.pump for c in self.children))
