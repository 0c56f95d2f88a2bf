"""The probes the chart gives the orchestrator, the dispatcher and the runners, asked
directly: ``GET /healthz`` (live: the event loop answers) and ``GET /readyz`` (ready: started,
consumers bound, connected to NATS) on each service's metrics port. A service frozen with
SIGSTOP fails its liveness check within the probe's timeout; one cut off from NATS is not
ready until it is back."""

from __future__ import annotations

import asyncio
import signal
import time

import aiohttp

from tests.support.stack import Stack, StackFactory

SERVICES = ("orchestrator", "dispatcher", "gateway", "runner-0")
PROBE_TIMEOUT = 3.0  # the chart's timeoutSeconds


async def probe(s: Stack, name: str, path: str) -> tuple[int, str] | None:
    """The answer, or None if none came within the probe's timeout."""
    url = f"http://127.0.0.1:{s.metrics_ports[name]}{path}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT)) as http,
            http.get(url) as resp,
        ):
            return resp.status, await resp.text()
    except (TimeoutError, aiohttp.ClientError):
        return None


async def until(s: Stack, name: str, path: str, want: int, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        got = await probe(s, name, path)
        if got is not None and got[0] == want:
            return got[1]
        assert time.monotonic() < deadline, (name, path, got)
        await asyncio.sleep(0.1)


async def test_live_and_ready_then_frozen_then_back(stack: StackFactory) -> None:
    s = await stack(runners=1, metrics=True)
    for name in SERVICES:
        # The stack is ready once the gateway and the runners are: the others may still be
        # starting (importing, taking partitions), so each is waited for.
        assert await until(s, name, "/healthz", 200) == "ok\n", name
        assert await until(s, name, "/readyz", 200) == "ready\n", name
    # All three frozen at once and probed side by side: each one's probe times out alone.
    for name in SERVICES:
        s.kill(name, signal.SIGSTOP)
    try:
        started = time.monotonic()
        answers = await asyncio.gather(*(probe(s, name, "/healthz") for name in SERVICES))
        assert answers == [None] * len(SERVICES)  # no answer: not live
        assert time.monotonic() - started <= PROBE_TIMEOUT + 0.5
    finally:
        for name in SERVICES:
            s.kill(name, signal.SIGCONT)
    for name in SERVICES:
        await until(s, name, "/healthz", 200)


async def test_not_ready_while_nats_is_away(stack: StackFactory) -> None:
    s = await stack(runners=1, metrics=True)
    assert s.nats is not None
    # Each service ready first: one still starting when NATS goes stays "starting".
    for name in SERVICES:
        await until(s, name, "/readyz", 200)
    s.nats.kill()
    for name in SERVICES:
        assert await until(s, name, "/readyz", 503) == "NATS disconnected\n", name
        # Still live: an outage is not a reason to restart anything.
        assert await probe(s, name, "/healthz") == (200, "ok\n"), name
    s.nats.start()
    for name in SERVICES:
        await until(s, name, "/readyz", 200, timeout=30)
