"""The gateway's request counters and latencies, with prometheus-client (shared/runtime/metrics.py
defines them); ``GET /metrics`` on the API port serves them with the NATS reconnects and
the process's own."""

from __future__ import annotations

from heddle.shared.runtime.metrics import HTTP_REQUESTS, HTTP_SECONDS, child, exposition
from prometheus_client import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
# A client may send any method name: those the API does not know share one label value.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Metrics:
    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "OTHER"
        child(HTTP_REQUESTS, method, route, str(status)).inc()
        child(HTTP_SECONDS, route).observe(seconds)

    async def render(self) -> bytes:
        return await exposition("gateway")
