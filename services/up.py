"""`heddle up`: the whole system on one machine, each service its own process.

Starts the embedded NATS server (unless HEDDLE_NATS_URL points at one), the orchestrator,
the dispatcher, N runner agents and the gateway, prefixes each one's output with its name,
restarts a service that crashes, and on Ctrl-C or SIGTERM stops them all, leaving nothing
behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from services.embedded_nats import EmbeddedNats, NatsServerError, port_open
from shared.settings import Settings
from shared.tasks import cancel_and_wait

RESTART_DELAY = 1.0


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    proc: asyncio.subprocess.Process | None = None
    pump: asyncio.Task | None = None
    restarts: int = 0


def service_argv(service: str) -> list[str]:
    return [sys.executable, "-m", "services.cli", service]


def plan(settings: Settings, runners: int, base_env: dict[str, str]) -> list[Child]:
    """The processes to start, in start order (the gateway last, once the rest is up)."""
    env = {
        **base_env,
        **settings.to_env(),
        "HEDDLE_NATS_URL": settings.nats_url,
        "PYTHONUNBUFFERED": "1",
    }
    children = [
        Child("orchestrator", service_argv("orchestrator"), env),
        Child("dispatcher", service_argv("dispatcher"), env),
    ]
    for i in range(runners):
        children.append(
            Child(
                f"runner-{i}", service_argv("runner"), {**env, "HEDDLE_RUNNER_NAME": f"runner-{i}"}
            )
        )
    children.append(
        Child(
            "gateway",
            service_argv("gateway"),
            {**env, "HEDDLE_GATEWAY_PORT": str(settings.gateway_port)},
        )
    )
    return children


class Supervisor:
    def __init__(self, children: list[Child], out=sys.stdout) -> None:
        self.children = children
        self.out = out
        self.stopping = False
        self.width = max(len(c.name) for c in children)

    def say(self, name: str, line: str) -> None:
        self.out.write(f"{name:>{self.width}} | {line}\n")
        self.out.flush()

    async def _spawn(self, child: Child) -> None:
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
        async for raw in proc.stdout:
            self.say(child.name, raw.decode(errors="replace").rstrip("\n"))
        code = await proc.wait()
        if not self.stopping:
            child.restarts += 1
            self.say(child.name, f"exited with {code}; restarting in {RESTART_DELAY:g}s")
            await asyncio.sleep(RESTART_DELAY)
            if not self.stopping:
                await self._spawn(child)

    async def start(self) -> None:
        for child in self.children:
            await self._spawn(child)

    async def stop(self, grace: float) -> None:
        self.stopping = True
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


async def run_up(settings: Settings, runners: int, data_dir: Path, nats_port: int) -> int:
    nats: EmbeddedNats | None = None
    if not os.environ.get("HEDDLE_NATS_URL"):
        nats = EmbeddedNats(data_dir / "nats", port=nats_port, log_file=data_dir / "nats.log")
        data_dir.mkdir(parents=True, exist_ok=True)
        nats.start()
        settings = Settings.from_env(nats_url=nats.url, gateway_port=settings.gateway_port)
    if port_open(settings.gateway_port):
        if nats:
            nats.stop()
        print(
            f"heddle up: port {settings.gateway_port} is already in use; pick another with --port",
            file=sys.stderr,
        )
        return 2
    sup = Supervisor(plan(settings, runners, dict(os.environ)))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await sup.start()
    where = f"data in {data_dir}" if nats else "external NATS"
    sup.say(
        "heddle",
        f"up: http://{settings.gateway_host}:{settings.gateway_port} "
        f"(NATS {settings.nats_url}, {where}, {runners} runners); Ctrl-C stops",
    )
    await stop.wait()
    sup.say("heddle", "stopping")
    await sup.stop(settings.shutdown_grace + settings.kill_grace + 5)
    if nats:
        nats.stop()
    sup.say("heddle", "stopped")
    return 0


def main_up(settings: Settings, runners: int, data_dir: str, nats_port: int) -> int:
    try:
        return asyncio.run(run_up(settings, runners, Path(data_dir).resolve(), nats_port))
    except NatsServerError as exc:
        print(f"heddle up: {exc}", file=sys.stderr)
        return 2
