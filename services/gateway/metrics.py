"""The gateway's request counters and latencies, with prometheus-client (shared/metrics.py
defines them); ``GET /metrics`` on the API port serves them with the NATS reconnects and
the process's own."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST

from shared.metrics import HTTP_REQUESTS, HTTP_SECONDS, exposition

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        HTTP_REQUESTS.labels(method, route, str(status)).inc()
        HTTP_SECONDS.labels(route).observe(seconds)

    async def render(self) -> bytes:
        return await exposition("gateway")
