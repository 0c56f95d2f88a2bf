"""Request counters and latencies in the Prometheus text format, without a dependency."""

from __future__ import annotations

from collections import defaultdict

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.latency: dict[str, list[int]] = defaultdict(lambda: [0] * (len(BUCKETS) + 1))
        self.latency_sum: dict[str, float] = defaultdict(float)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests[(method, route, status)] += 1
        counts = self.latency[route]
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                counts[i] += 1
        counts[-1] += 1
        self.latency_sum[route] += seconds

    def render(self) -> str:
        lines = [
            "# HELP heddle_http_requests_total HTTP requests by method, route and status.",
            "# TYPE heddle_http_requests_total counter",
        ]
        for (method, route, status), n in sorted(self.requests.items()):
            lines.append(
                f'heddle_http_requests_total{{method="{method}",route="{route}",'
                f'status="{status}"}} {n}'
            )
        lines += [
            "# HELP heddle_http_request_seconds HTTP request latency by route.",
            "# TYPE heddle_http_request_seconds histogram",
        ]
        for route, counts in sorted(self.latency.items()):
            for bound, n in zip(BUCKETS, counts, strict=False):
                lines.append(
                    f'heddle_http_request_seconds_bucket{{route="{route}",le="{bound}"}} {n}'
                )
            lines.append(
                f'heddle_http_request_seconds_bucket{{route="{route}",le="+Inf"}} {counts[-1]}'
            )
            lines.append(
                f'heddle_http_request_seconds_sum{{route="{route}"}} {self.latency_sum[route]:.6f}'
            )
            lines.append(f'heddle_http_request_seconds_count{{route="{route}"}} {counts[-1]}')
        return "\n".join(lines) + "\n"
