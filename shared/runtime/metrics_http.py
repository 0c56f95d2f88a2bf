"""The metrics and probe endpoint of a service: ``GET /metrics``, ``GET /healthz`` and
``GET /readyz`` on HEDDLE_METRICS_HOST and HEDDLE_METRICS_PORT, served on the service's own
event loop (no thread), so a gauge read before the scrape may await NATS, and an answer to
``/healthz`` proves the loop turns: a service frozen (SIGSTOP) or stuck in a blocking call
answers nothing, and its liveness probe times out. ``/readyz`` answers 503 until the service
has started (its consumers bound), while NATS is disconnected, and once it is stopping.
Started before the service and stopped after it, so its shutdown can be watched to the end."""

from __future__ import annotations

import logging

from aiohttp import web
from heddle.shared.runtime.health import Health
from heddle.shared.runtime.metrics import exposition
from prometheus_client import CONTENT_TYPE_LATEST

log = logging.getLogger("heddle.metrics")


class MetricsServer:
    def __init__(self, service: str, host: str, port: int, health: Health | None = None) -> None:
        self.service = service
        self.host = host
        self.port = port
        self.health = health
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await exposition(self.service)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        ready, why = self.health.ready() if self.health is not None else (True, "ready")
        return web.Response(text=why + "\n", status=200 if ready else 503)
