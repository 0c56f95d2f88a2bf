"""A run's events as the API streams them (GET /api/runs/{run}/events), read to their end; and
a one-step run's records as the orchestrator writes them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunRecord, StepRecord, encode

from tests.support.stack import Stack

Events = list[tuple[str, dict[str, Any]]]


async def parse(
    resp: aiohttp.ClientResponse, within: float, on_event: Callable[[Events], None]
) -> Events:
    """Every event of an answered stream, read until the server ends it; ``on_event`` sees
    the list after each."""
    assert resp.status == 200 and resp.content_type == "text/event-stream", resp.status
    got: Events = []
    kind = ""
    async with asyncio.timeout(within):  # the stream must end by itself
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[len("event: ") :]
            elif line.startswith("data: "):
                got.append((kind, json.loads(line[len("data: ") :])))
                on_event(got)
    return got


async def events(s: Stack, run_id: str, within: float = 30.0, query: str = "") -> Events:
    """Every event of the stream, read until the server ends it."""
    session = await s.http()
    async with session.get(f"{s.base}/api/runs/{run_id}/events{query}") as resp:
        return await parse(resp, within, lambda _: None)


def records(run_id: str, step: str, run: str) -> dict[str, bytes]:
    """A one-step run's records as the orchestrator writes them."""
    done = None if run == "running" else "2026-01-01T00:00:00Z"
    return {
        names.step_key(run_id, "a"): encode(
            StepRecord(id="a", command="true", status=step, attempt=1, runner="r")  # type: ignore[arg-type]
        ),
        names.run_key(run_id): encode(
            RunRecord(
                run_id=run_id,
                status=run,  # type: ignore[arg-type]
                created_at="2026-01-01T00:00:00Z",
                step_count=1,
                finished_at=done,
            )
        ),
    }
