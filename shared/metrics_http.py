"""The metrics endpoint of a service: ``GET /metrics`` on HEDDLE_METRICS_HOST and
HEDDLE_METRICS_PORT, served on the service's own event loop (no thread), so a gauge read
before the scrape may await NATS. Started before the service and stopped after it, so its
shutdown can be watched to the end."""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from shared.metrics import exposition

log = logging.getLogger("heddle.metrics")


class MetricsServer:
    def __init__(self, service: str, host: str, port: int) -> None:
        self.service = service
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
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
