"""A notify target for tests (docs/notifications.md): an aiohttp app on 127.0.0.1 that keeps
every delivery it is sent and answers each with ``status``."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from heddle.services.local.embedded_nats import free_port


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    port: int = field(default_factory=free_port)
    status: int = 200
    deliveries: list[Delivery] = field(default_factory=list)
    # Set: each delivery is kept as it arrives, and answered only once this is set.
    hold: asyncio.Event | None = None
    followed: int = 0  # requests to where a 3xx answer pointed
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self._receive)
        app.router.add_route("*", "/moved", self._moved)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def of_run(self, run_id: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.json["runId"] == run_id]

    async def _receive(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.deliveries.append(Delivery(dict(request.headers), body))
        if self.hold is not None:
            await self.hold.wait()
        moved = {"Location": "/moved"} if 300 <= self.status < 400 else None
        return web.Response(status=self.status, headers=moved)

    async def _moved(self, request: web.Request) -> web.Response:
        self.followed += 1
        return web.Response(status=200)
