"""The JSON Schema of a workflow file served by a gateway app without a token, at
/schema/workflow.json, as the API's document lists it. What the schema says:
tests/unit/gateway/test_workflow_schema.py."""

from __future__ import annotations

from pathlib import Path

import msgspec
from heddle.services.gateway.openapi.workflow_schema import schema_text, workflow_schema

from tests.support.gateway_apps import Gateway, call
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway

PATH = "/schema/workflow.json"


async def test_served_without_a_token_as_generated(gateway: Gateway, admin_file: Path) -> None:
    client = await gateway()
    async with client.get(PATH) as resp:
        body = await resp.read()
        assert resp.status == 200 and resp.content_type == "application/schema+json"
    assert body == schema_text()  # byte for byte the copy in docs/ (the unit test's)
    assert msgspec.json.decode(body) == workflow_schema()
    async with client.request("HEAD", PATH) as resp:
        assert resp.status == 200
    # Listed in the API's document as every route is, open to anyone.
    status, doc = await call(client, "GET", "/openapi.json")
    assert status == 200
    operation = doc["paths"][PATH]["get"]
    assert operation["security"] == []
    assert set(operation["responses"]["200"]["content"]) == {"application/schema+json"}
