"""Approval gates driven over HTTP (docs/approvals.md), for the tests on a real stack."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from heddle.shared.wire import names
from nats.js.kv import KeyValue

from tests.support.stack import Stack

# build -> ok (a gate) -> ship
DEPLOY: dict[str, Any] = {
    "steps": [
        {"id": "build", "command": "true"},
        {"id": "ok", "dependsOn": ["build"], "approval": {"message": "Ship build 7?"}},
        {"id": "ship", "dependsOn": ["ok"], "command": "true"},
    ]
}


def with_token(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def make_token(s: Stack, name: str, role: str) -> dict[str, str]:
    """The headers of a new token of ``role`` named ``name``."""
    status, made = await s.request("POST", "/api/tokens", json={"name": name, "role": role})
    assert status == 201, made
    return with_token(made["token"])


async def answer(
    s: Stack,
    run_id: str,
    verb: str,
    step: str = "ok",
    headers: dict[str, str] | None = None,
    query: str = "",
    **body: Any,
) -> tuple[int, Any]:
    """``verb`` (approve or reject) the gate ``step`` of the run."""
    path = f"/api/runs/{run_id}/steps/{step}/{verb}{query}"
    return await s.request("POST", path, json=body or None, headers=headers)


async def listed(s: Stack, query: str = "") -> list[tuple[str, str]]:
    """The gates ``GET /api/approvals`` lists: (run, step) each."""
    status, body = await s.request("GET", "/api/approvals" + query)
    assert status == 200, body
    return [(g["runId"], g["stepId"]) for g in body["approvals"]]


@asynccontextmanager
async def gate_record(
    s: Stack, run_id: str, step: str = "ok"
) -> AsyncIterator[tuple[KeyValue, str]]:
    """heddle-approvals and the gate's key in it, to write as a service would."""
    nc = await s.connect()
    try:
        yield (
            await nc.jetstream().key_value(names.APPROVALS_BUCKET),
            names.approval_key(run_id, step),
        )
    finally:
        await nc.close()
