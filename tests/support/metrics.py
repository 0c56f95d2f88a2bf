"""Metrics scraped from a stack's processes over HTTP and parsed as Prometheus would."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.support.stack import Stack

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def scrape(s: Stack, name: str) -> Samples:
    url = f"http://127.0.0.1:{s.metrics_ports[name]}/metrics"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=")
        return parse(await resp.text())
