"""Gateway apps for tests: each on aiohttp's TestServer (a real port on 127.0.0.1) over the
real nats-server of the ``nats_server`` fixture, seeded with an admin token from a file."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.web import BaseRunner
from heddle.services.gateway.app import create_app
from heddle.services.gateway.http.protocol import GatewayRunner
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.core.tokens import new_token
from heddle.shared.runtime.settings import Settings

Gateway = Callable[..., Awaitable[TestClient]]
FLOW = {"name": "flow", "steps": [{"id": "a", "command": "true"}]}


class GatewayTestServer(TestServer):
    """A TestServer that runs the app as the gateway does (protocol.GatewayRunner)."""

    async def _make_runner(self, **kwargs: Any) -> BaseRunner:
        return GatewayRunner(self.app, **kwargs)


@pytest.fixture
def admin_file(tmp_path: Path) -> Path:
    path = tmp_path / "admin-token"
    path.write_text(new_token() + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
async def gateway(nats_server: EmbeddedNats, admin_file: Path) -> AsyncIterator[Gateway]:
    """Factory: a gateway app on its own TestServer (a real port on 127.0.0.1), seeded
    with the admin token in ``admin_file``; settings as keyword arguments."""
    made: list[TestClient] = []

    async def make(**settings: Any) -> TestClient:
        settings = {
            "nats_url": nats_server.url,
            "admin_token_file": str(admin_file),
            "submit_confirm_timeout": 0.2,  # no orchestrator here: a submit answers 202
            **settings,
        }
        client = TestClient(GatewayTestServer(create_app(Settings(**settings))))
        made.append(client)  # closed at the end even if it fails to start
        await client.start_server()
        return client

    yield make
    for client in made:
        await client.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def root(admin_file: Path) -> str:
    """The bootstrap admin token."""
    return admin_file.read_text().strip()


async def call(
    client: TestClient, method: str, path: str, token: str | None = None, **kwargs: Any
) -> tuple[int, Any]:
    headers = kwargs.pop("headers", {})
    if token is not None:
        headers = {**bearer(token), **headers}
    async with client.request(method, path, headers=headers, **kwargs) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.text()
        return resp.status, body


async def make_token(client: TestClient, admin_file: Path, name: str, role: str) -> str:
    async with client.post(
        "/api/tokens", json={"name": name, "role": role}, headers=bearer(root(admin_file))
    ) as resp:
        assert resp.status == 201, await resp.text()
        return (await resp.json())["token"]


async def status_becomes(get: Callable[[], Awaitable[int]], want: int, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while (got := await get()) != want:
        assert time.monotonic() < deadline, f"still {got}, not {want}, after {within}s"
        await asyncio.sleep(0.02)
