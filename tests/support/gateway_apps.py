"""Gateway apps for tests: each served as the gateway serves it (services/gateway/app.py's
Gateway, on a free port on 127.0.0.1) over the real nats-server of the ``nats_server``
fixture, seeded with an admin token from a file, with an HTTP session to it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from heddle.services.gateway.app import Gateway as GatewayService
from heddle.services.local.embedded_nats import EmbeddedNats, free_port
from heddle.shared.core.tokens import new_token
from heddle.shared.runtime.settings import Settings
from yarl import URL

FLOW = {"name": "flow", "steps": [{"id": "a", "command": "true"}]}
Answer = AbstractAsyncContextManager[aiohttp.ClientResponse]


class GatewayClient:
    """A gateway app served by the gateway's own start (its runner answers what aiohttp
    cannot parse in JSON and guards slow connections), and a session that asks it: ``get``,
    ``post``, ... take a path, as aiohttp's TestClient's do."""

    def __init__(self, settings: Settings) -> None:
        self.host, self.port = settings.gateway_host, settings.gateway_port
        self.service = GatewayService(settings)
        self.session = aiohttp.ClientSession()

    async def start(self) -> None:
        await self.service.start()

    async def close(self) -> None:
        await self.session.close()
        await self.service.stop()

    @property
    def app(self) -> web.Application:
        assert self.service.runner is not None, "not started"
        return self.service.runner.app

    def make_url(self, path: str) -> URL:
        return URL.build(scheme="http", host=self.host, port=self.port).join(URL(path))

    def request(self, method: str, path: str, **kwargs: Any) -> Answer:
        return self.session.request(method, self.make_url(path), **kwargs)

    def get(self, path: str, **kwargs: Any) -> Answer:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Answer:
        return self.request("POST", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Answer:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Answer:
        return self.request("DELETE", path, **kwargs)


Gateway = Callable[..., Awaitable[GatewayClient]]


@pytest.fixture
def admin_file(tmp_path: Path) -> Path:
    path = tmp_path / "admin-token"
    path.write_text(new_token() + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
async def gateway(nats_server: EmbeddedNats, admin_file: Path) -> AsyncIterator[Gateway]:
    """Factory: a gateway app on a port of its own, seeded with the admin token in
    ``admin_file``; settings as keyword arguments."""
    made: list[GatewayClient] = []

    async def make(**settings: Any) -> GatewayClient:
        settings = {
            "nats_url": nats_server.url,
            "admin_token_file": str(admin_file),
            "submit_confirm_timeout": 0.2,  # no orchestrator here: a submit answers 202
            "gateway_host": "127.0.0.1",
            "gateway_port": free_port(),
            **settings,
        }
        client = GatewayClient(Settings(**settings))
        made.append(client)  # closed at the end even if it fails to start
        await client.start()
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
    client: GatewayClient | TestClient,
    method: str,
    path: str,
    token: str | None = None,
    **kwargs: Any,
) -> tuple[int, Any]:
    headers = kwargs.pop("headers", {})
    if token is not None:
        headers = {**bearer(token), **headers}
    async with client.request(method, path, headers=headers, **kwargs) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.text()
        return resp.status, body


async def make_token(
    client: GatewayClient | TestClient, admin_file: Path, name: str, role: str
) -> str:
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
