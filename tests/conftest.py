"""Shared fixtures: a real nats-server (one per session, cleaned for each test; a test's own
where it needs one) and a factory for whole Heddle stacks; and each test marked with its kind,
the folder it is in (tests/unit, compat, integration, fault, deploy, web), so `-m unit`
selects the pure tests and `-m "not fault"` leaves out the ones that kill processes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from heddle.services.local import embedded_nats
from heddle.services.local.embedded_nats import EmbeddedNats, free_port
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from nats.aio.client import Client

from tests.support import xdist_scheduling
from tests.support.stack import FAST, Stack, StackFactory

TESTS = Path(__file__).parent
# A test's kind is the folder of tests/ it is in; each is a marker of pyproject.toml.
KINDS = ("unit", "compat", "integration", "fault", "deploy", "web", "upgrade")


def pytest_configure(config: pytest.Config) -> None:
    """Each xdist worker hands out ports from its own slice of the listen range: a port a
    test chose stays free for its service's restart, as no other worker's server may take
    it meanwhile (free_port only remembers the ports its own process handed out). Under
    xdist, the fault tests go to one worker (tests/support/xdist_scheduling.py)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker.isdigit() and count > 1:
        whole = embedded_nats.LISTEN_PORTS
        size = len(whole) // count
        first = whole.start + int(worker) * size
        embedded_nats.LISTEN_PORTS = range(first, first + size)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(xdist_scheduling)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
        if folder in KINDS:
            item.add_marker(folder)


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    """The Helm chart, loaded once per module (tests/support/chart_render.py)."""
    from tests.support.chart_render import load_chart

    yield from load_chart()


@pytest.fixture(scope="module")
def default(chart: Any) -> Any:
    """The chart rendered with its default values."""
    from tests.support.chart_render import render

    return render(chart)


def started_nats(folder: Path) -> EmbeddedNats:
    """A nats-server with JetStream on a free port and a store under ``folder``."""
    server = EmbeddedNats(folder / "nats", port=free_port(), log_file=folder / "nats.log")
    server.start()
    return server


@pytest.fixture(scope="session")
def session_nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    """One nats-server for the whole session, behind ``nats_server``."""
    server = started_nats(tmp_path_factory.mktemp("session-nats"))
    yield server
    server.stop()


@pytest.fixture
def own_nats_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A nats-server of the test's own, for a test that freezes, kills or restarts it.
    ``nats_server`` (and what is built on it: ``heddle_nc``, ``gateway``) is this one in
    a test that asks for it."""
    server = started_nats(tmp_path)
    yield server
    server.stop()


async def delete_every_stream(url: str) -> None:
    """Every stream on the server deleted: the KV buckets and object stores are streams."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        while streams := await js.streams_info():
            for info in streams:
                await js.delete_stream(info.config.name)
    finally:
        await nc.close()


@pytest.fixture
def nats_server(request: pytest.FixtureRequest, session_nats_server: EmbeddedNats) -> EmbeddedNats:
    """The session's nats-server with no stream on it (each test starts clean; nothing else
    outlives a test's connections), or the test's ``own_nats_server`` if it asks for one."""
    if "own_nats_server" in request.fixturenames:
        return request.getfixturevalue("own_nats_server")
    loop = asyncio.new_event_loop()  # its own: the test's loop is not running yet
    try:
        loop.run_until_complete(delete_every_stream(session_nats_server.url))
    finally:
        loop.close()
    return session_nats_server


@pytest.fixture
async def heddle_nc(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    """A connection to ``nats_server`` with every Heddle stream and bucket created."""
    client = await nats.connect(nats_server.url)
    await ensure_resources(client, Settings(nats_url=nats_server.url))
    yield client
    await client.close()


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[StackFactory]:
    """Factory: ``await stack(runners=4, **settings)`` starts NATS, the orchestrator, the
    dispatcher (with ``dispatchers=2``, dispatcher-1 too; ``orchestrators`` likewise), the
    runners and the gateway as real processes, and waits until the pool shows every runner.
    Everything is stopped at the end of the test."""
    made: list[Stack] = []

    async def make(
        runners: int = 2,
        services: tuple[str, ...] = ("orchestrator", "dispatcher", "gateway"),
        wait: bool = True,
        metrics: bool = False,
        dispatchers: int = 1,
        orchestrators: int = 1,
        **settings: str,
    ) -> Stack:
        s = Stack(tmp_path / f"stack{len(made)}", settings={**FAST, **settings})
        s.tmp.mkdir(parents=True)
        made.append(s)
        s.gateway_port = free_port()
        if dispatchers > 1 and "dispatcher" in services:  # dispatcher-1 ... beside it
            at = services.index("dispatcher") + 1
            more = tuple(f"dispatcher-{i}" for i in range(1, dispatchers))
            services = services[:at] + more + services[at:]
        if orchestrators > 1 and "orchestrator" in services:
            at = services.index("orchestrator") + 1
            more = tuple(f"orchestrator-{i}" for i in range(1, orchestrators))
            services = services[:at] + more + services[at:]
        if metrics:  # each process its own metrics port (tests/integration/test_metrics.py)
            names = [*services, *(f"runner-{i}" for i in range(runners))]
            s.metrics_ports = {name: free_port() for name in names}
        s.start_nats(runners=tuple(f"runner-{i}" for i in range(runners)))
        for name in services:
            s.start(name)
        for i in range(runners):
            s.start(f"runner-{i}")
        if wait and "gateway" in services:
            await s.wait_ready(runners)
        return s

    yield make
    for s in made:
        await s.close()
        s.stop_all()
    for s in made:
        s.assert_no_secret_in_output()
