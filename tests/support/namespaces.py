"""Namespaces for tests: a namespace's record written to heddle-namespaces as the gateway's
namespace routes would (the record is what makes a namespace exist), and tokens granted in
namespaces, made through the API."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from heddle.shared.wire import names
from heddle.shared.wire.contracts import NamespaceRecord, encode
from heddle.shared.wire.timefmt import now_rfc3339
from nats.aio.client import Client

Answer = tuple[int, str, bytes]  # status, content type, body: compared byte for byte


async def create_namespaces(nc: Client, *namespaces: str) -> None:
    kv = await nc.jetstream().key_value(names.NAMESPACES_BUCKET)
    for ns in namespaces:
        await kv.put(ns, encode(NamespaceRecord(name=ns, created_at=now_rfc3339())))


async def answer(base: str, token: str, method: str, path: str, **kwargs: Any) -> Answer:
    """One request's answer, whole, as sent."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, base + path, headers=headers, **kwargs) as resp,
    ):
        return resp.status, resp.content_type, await resp.read()


async def granted_token(base: str, admin: str, name: str, grants: dict[str, str]) -> str:
    """A new token with these grants (namespace -> role), made by ``admin``."""
    body = {"name": name, "namespaces": grants}
    status, _, raw = await answer(base, admin, "POST", "/api/tokens", json=body)
    assert status == 201, raw
    token: str = json.loads(raw)["token"]
    return token
