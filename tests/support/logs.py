"""A step's log read through a stack's API: its lines, its document, its live stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from tests.support.stack import Stack


async def sse(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """Server-sent events as dicts: event, id, data (decoded JSON)."""
    event: dict[str, Any] = {}
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if not line:
            if "data" in event:
                yield {"event": "message", **event, "data": json.loads(event["data"])}
            event = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(": ")
            event[field] = value


async def step_doc(s: Stack, run_id: str, step: str, query: str = "") -> dict[str, Any]:
    status, body = await s.request("GET", f"/api/runs/{run_id}/steps/{step}{query}")
    assert status == 200, (status, body)
    return body


async def all_lines(s: Stack, run_id: str, step: str, after: int = 0) -> list[dict[str, Any]]:
    status, body = await s.request("GET", f"/api/runs/{run_id}/steps/{step}/logs?after={after}")
    assert status == 200, (status, body)
    return body["lines"]


def texts(lines: list[dict[str, Any]], stream: str) -> list[str]:
    return [x["text"] for x in lines if x["stream"] == stream]
