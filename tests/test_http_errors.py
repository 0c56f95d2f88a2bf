"""Bad input over HTTP: the right status, every problem named, nothing stored. Through a
gateway app on aiohttp's TestServer over a real nats-server (tests/gateway_apps.py)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import nats
import pytest
from aiohttp.test_utils import TestClient
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

from tests.gateway_apps import Gateway, call, root
from tests.gateway_apps import admin_file as admin_file  # fixtures
from tests.gateway_apps import gateway as gateway


def step(i: str, cmd: str = "true", deps: list[str] | None = None) -> dict:
    return {"id": i, "command": cmd, "dependsOn": deps or []}


BAD_WORKFLOWS = [
    ({"steps": [step("a"), step("a")]}, "steps[1].id", "duplicate"),
    ({"steps": [step("a", deps=["ghost"])]}, "steps[0].dependsOn[0]", "ghost"),
    ({"steps": [step("a", deps=["a"])]}, "steps[0].dependsOn[0]", "itself"),
    (
        {"steps": [step("a", deps=["b"]), step("b", deps=["a"])]},
        "steps[0].dependsOn",
        "a -> b -> a",
    ),
    ({"steps": [step("bad id!")]}, "steps[0].id", "must match"),
    ({"steps": []}, "steps", "at least one"),
    ({"steps": [step("a", "x" * 20000)]}, "steps[0].command", "limit"),
    ({"steps": [{**step("a"), "retries": -1}]}, "steps[0].retries", "retries"),
    ({"steps": [{**step("a"), "timeoutSeconds": 0}]}, "steps[0].timeoutSeconds", "timeoutSeconds"),
    ({"steps": [{**step("a"), "colour": "red"}]}, "steps[0].colour", "unknown field"),
    ({"steps": [step("a")], "extra": 1}, "extra", "unknown field"),
    ({"runId": "no/slash", "steps": [step("a")]}, "runId", "must match"),
    ({"steps": [step("a")], "schedule": "not cron"}, "schedule", "5 fields"),
    ({"steps": [step("a")], "timezone": "Mars/Olympus"}, "timezone", "unknown timezone"),
]


class Client:
    """Requests as the admin, answered as (status, decoded body)."""

    def __init__(self, gw: TestClient, admin_file: Path) -> None:
        self.gw, self.token = gw, root(admin_file)

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        return await call(self.gw, method, path, self.token, **kwargs)


async def test_bad_workflows_are_rejected_with_every_problem(
    gateway: Gateway, admin_file: Path, nats_server: EmbeddedNats
) -> None:
    s = Client(await gateway(max_steps=50), admin_file)
    for doc, path, words in BAD_WORKFLOWS:
        status, body = await s.request("POST", "/api/runs", json=doc)
        assert status == 400, (doc, body)
        assert body["error"] == "invalid workflow"
        assert any(p["path"] == path and words in p["message"] for p in body["problems"]), body
    # Several problems at once are all listed.
    status, body = await s.request(
        "POST",
        "/api/runs",
        json={"steps": [step("a"), step("a"), step("b", deps=["nope"]), {"id": 7, "command": "x"}]},
    )
    assert status == 400
    assert {p["path"] for p in body["problems"]} >= {
        "steps[1].id",
        "steps[2].dependsOn[0]",
        "steps[3].id",
    }
    # More steps than the limit.
    status, body = await s.request(
        "POST", "/api/runs", json={"steps": [step(f"s{i}") for i in range(51)]}
    )
    assert status == 400 and "limit is 50" in body["problems"][0]["message"]
    # Malformed JSON, wrong content type, oversized body, bad path id, unknown route.
    status, body = await s.request(
        "POST", "/api/runs", data=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert status == 400 and "malformed JSON" in body["error"]
    status, body = await s.request(
        "POST", "/api/runs", data=b"steps", headers={"Content-Type": "text/plain"}
    )
    assert status == 415 and "application/json" in body["error"]
    status, body = await s.request(
        "POST",
        "/api/runs",
        data=io.BytesIO(b"[" + b" " * Settings().max_body_bytes + b"]"),
        headers={"Content-Type": "application/json"},
    )
    assert status == 413 and "too large" in body["error"]
    status, body = await s.request("GET", "/api/runs/bad%20id")
    assert status == 400 and body["problems"][0]["path"] == "run"
    status, body = await s.request("GET", "/api/runs/unknown")
    assert status == 404 and "unknown" in body["error"]
    status, body = await s.request("DELETE", "/api/runs/x")
    assert status == 405
    # Nothing was stored for any rejected request: no command reached the stream.
    nc = await nats.connect(nats_server.url)
    try:
        info = await nc.jetstream().stream_info(names.CMD_STREAM)
        assert info.state.messages == 0
    finally:
        await nc.close()


@pytest.mark.parametrize("body", [b"[]", b'"steps"', b"null"])
async def test_non_object_bodies(gateway: Gateway, admin_file: Path, body: bytes) -> None:
    s = Client(await gateway(), admin_file)
    status, doc = await s.request(
        "POST", "/api/runs", data=body, headers={"Content-Type": "application/json"}
    )
    assert status == 400 and doc["problems"][0]["message"] == "the body must be a JSON object"
