"""The OpenAPI document served by a gateway app without a token, at /openapi.json and as a
page at /docs. What it says: tests/unit/gateway/test_openapi.py; the live API fuzzed against
it: tests/integration/test_api_fuzz.py."""

from __future__ import annotations

from pathlib import Path

import msgspec
from heddle.services.gateway.app import ROUTES
from heddle.services.gateway.openapi.document import document

from tests.support.gateway_apps import Gateway, call
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway


async def test_served_without_a_token_as_json_and_as_a_page(
    gateway: Gateway, admin_file: Path
) -> None:
    client = await gateway()
    status, body = await call(client, "GET", "/openapi.json")
    assert status == 200 and body == msgspec.json.decode(msgspec.json.encode(document(ROUTES)))
    async with client.get("/docs") as resp:
        page = await resp.text()
        assert resp.status == 200 and resp.content_type == "text/html"
        assert "<script" not in page and "http://" not in page and "https://" not in page
        assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
    for ops in body["paths"].values():
        for op in ops.values():
            assert f'id="{op["operationId"]}"' in page
