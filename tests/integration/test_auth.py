"""Roles, the Host check and the refusal of form posts, on gateway apps served by aiohttp's
TestServer over a real nats-server (tests/support/gateway_apps.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from heddle.services.gateway.app import ROUTES, create_app
from heddle.services.gateway.http.auth import route_roles
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.core.tokens import new_token
from heddle.shared.runtime.settings import Settings

from tests.support.gateway_apps import FLOW, Gateway, bearer, call, make_token, root
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway

# ---- 401, open routes --------------------------------------------------------------------


async def test_no_token_or_a_wrong_one_is_401(gateway: Gateway, admin_file: Path) -> None:
    gw = await gateway()
    async with gw.get("/api/runs") as resp:
        assert resp.status == 401
        assert resp.headers["WWW-Authenticate"] == "Bearer"
        assert "Authorization: Bearer" in (await resp.json())["error"]
    wrong = new_token()
    for header in (f"Bearer {wrong}", f"Basic {wrong}", "Bearer", "bearer  "):
        async with gw.get("/api/runners", headers={"Authorization": header}) as resp:
            assert resp.status == 401, header
            body = await resp.text()
            assert wrong not in body  # a token is never echoed
    async with gw.get("/api/runners", headers=bearer(wrong)) as resp:
        assert resp.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
        assert (await resp.json())["error"] == "unknown token"
    # Unknown routes are no way around it, and a token holder is told what is wrong.
    assert (await call(gw, "GET", "/api/nope"))[0] == 401
    assert (await call(gw, "GET", "/api/nope", root(admin_file)))[0] == 404
    assert (await call(gw, "DELETE", "/api/runs/x", root(admin_file)))[0] == 405
    # Open: liveness, readiness, the page and its assets, metrics (by default).
    for path in ("/healthz", "/readyz", "/", "/metrics"):
        assert (await call(gw, "GET", path))[0] == 200, path
    async with gw.get("/") as resp:
        script = next(p for p in (await resp.text()).split('"') if p.startswith("/static/app"))
    assert (await call(gw, "GET", script))[0] == 200
    assert (await call(gw, "GET", "/api/runs", root(admin_file)))[0] == 200


async def test_metrics_can_require_a_token(gateway: Gateway, admin_file: Path) -> None:
    gw = await gateway(metrics_auth="token")
    async with gw.get("/metrics") as resp:
        assert resp.status == 401 and resp.headers["WWW-Authenticate"] == "Bearer"
    viewer = await make_token(gw, admin_file, "scraper", "viewer")
    status, text = await call(gw, "GET", "/metrics", viewer)
    assert status == 200 and "heddle" in text
    assert (await call(gw, "GET", "/healthz"))[0] == 200


async def test_auth_none_lets_anyone_in_and_says_so(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="heddle.gateway")
    gw = await gateway(auth="none", admin_token_file="")
    assert (await call(gw, "GET", "/api/runs"))[0] == 200
    assert (await call(gw, "POST", "/api/workflows", json=FLOW))[0] == 201
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("HEDDLE_AUTH=none" in r.getMessage() for r in warned)
    # The form refusal and the Host check hold without tokens too.
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert (await call(gw, "POST", "/api/workflows/flow/runs", headers=form))[0] == 415
    assert (await call(gw, "GET", "/api/runs", headers={"Host": "evil.example"}))[0] == 421


# ---- roles -------------------------------------------------------------------------------


async def test_roles(gateway: Gateway, admin_file: Path) -> None:
    gw = await gateway()
    viewer = await make_token(gw, admin_file, "v", "viewer")
    operator = await make_token(gw, admin_file, "o", "operator")
    boss = await make_token(gw, admin_file, "a2", "admin")

    # A viewer reads everything, changes nothing.
    for path in ("/api/runs", "/api/runners", "/api/workflows", "/pods", "/api/runs/x"):
        assert (await call(gw, "GET", path, viewer))[0] in (200, 404), path
    status, body = await call(gw, "POST", "/api/runs", viewer, json=FLOW)
    assert status == 403
    assert body["error"] == "this needs the admin role; the token has viewer"
    assert (body["needs"], body["role"]) == ("admin", "viewer")
    status, body = await call(gw, "PATCH", "/api/workflows/flow", viewer, json={"paused": True})
    assert status == 403 and body["error"] == "this needs the operator role; the token has viewer"
    assert (await call(gw, "POST", "/api/runs/x/cancel", viewer))[0] == 403
    assert (await call(gw, "GET", "/api/tokens", viewer))[0] == 403

    # An operator cannot register a workflow, an admin can; then the operator runs it.
    status, body = await call(gw, "POST", "/api/workflows", operator, json=FLOW)
    assert status == 403
    assert body["error"] == "this needs the admin role; the token has operator"
    assert (await call(gw, "POST", "/api/workflows", boss, json=FLOW))[0] == 201
    status, body = await call(gw, "POST", "/api/workflows/flow/runs", operator)
    assert status == 202 and body["workflow"] == "flow", body
    status, body = await call(gw, "PATCH", "/api/workflows/flow", operator, json={"paused": True})
    assert status == 200 and body["paused"] is True
    status, body = await call(gw, "POST", "/api/runs/ghost/cancel", operator)
    assert status == 404 and "ghost" in body["error"]  # past the role check
    assert (await call(gw, "POST", "/api/runs", operator, json=FLOW))[0] == 403
    assert (await call(gw, "POST", "/api/tokens", operator, json={}))[0] == 403

    # An admin submits (202: no orchestrator here to confirm it).
    status, body = await call(gw, "POST", "/api/runs", boss, json={"runId": "r1", **FLOW})
    assert status == 202 and body["runId"] == "r1"
    assert (await call(gw, "POST", "/workflow", viewer, json=FLOW))[0] == 403


def test_every_route_has_a_role() -> None:
    app = create_app(Settings())
    routes = {
        (r.method, r.resource.canonical)
        for r in app.router.routes()
        if r.method != "HEAD" and r.resource is not None
    }
    roles = route_roles(ROUTES, Settings())
    assert routes == set(roles), routes ^ set(roles)
    assert set(roles.values()) == {None, "viewer", "operator", "admin"}


async def test_a_route_without_a_role_needs_admin(
    nats_server: EmbeddedNats, admin_file: Path
) -> None:
    async def secret(request: web.Request) -> web.Response:
        return web.json_response({"secret": True})

    app = create_app(Settings(nats_url=nats_server.url, admin_token_file=str(admin_file)))
    app.router.add_get("/api/new-thing", secret)
    async with TestClient(TestServer(app)) as gw:
        assert (await call(gw, "GET", "/api/new-thing"))[0] == 401
        operator = await make_token(gw, admin_file, "op", "operator")
        status, body = await call(gw, "GET", "/api/new-thing", operator)
        assert status == 403 and "admin role" in body["error"]
        status, body = await call(gw, "GET", "/api/new-thing", root(admin_file))
        assert (status, body) == (200, {"secret": True})


# ---- Host and form posts -------------------------------------------------------------------


async def test_host_check(gateway: Gateway, admin_file: Path) -> None:
    gw = await gateway()
    boss = root(admin_file)
    port = gw.port
    status, body = await call(
        gw, "GET", "/api/runs", boss, headers={"Host": f"evil.example:{port}"}
    )
    assert status == 421 and "evil.example" in body["error"]
    assert (await call(gw, "GET", "/", headers={"Host": "evil.example"}))[0] == 421
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "blue-gateway:8080"):
        assert (await call(gw, "GET", "/api/runs", boss, headers={"Host": host}))[0] == 200, host
    # Probes send the pod's IP as Host.
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await call(gw, "GET", path, headers={"Host": "10.1.2.3:8080"}))[0] == 200
    named = await gateway(allowed_hosts="heddle.example.com")
    status, _ = await call(named, "GET", "/api/runs", boss, headers={"Host": "heddle.example.com"})
    assert status == 200
    assert (await call(named, "GET", "/api/runs", boss, headers={"Host": "localhost"}))[0] == 421
    # The listen address is always allowed.
    assert (await call(named, "GET", "/api/runs", boss))[0] == 200


async def test_form_posts_are_refused(gateway: Gateway, admin_file: Path) -> None:
    gw = await gateway()
    boss = root(admin_file)
    assert (await call(gw, "POST", "/api/workflows", boss, json=FLOW))[0] == 201
    for kind in (
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/plain;charset=UTF-8",
    ):
        status, body = await call(
            gw, "POST", "/api/workflows/flow/runs", boss, headers={"Content-Type": kind}
        )
        assert status == 415 and "application/json" in body["error"], kind
        status, _ = await call(
            gw,
            "PATCH",
            "/api/workflows/flow",
            boss,
            data="paused=true",
            headers={"Content-Type": kind},
        )
        assert status == 415, kind
    # A POST without a body or a content type is a plain trigger (curl -XPOST).
    status, body = await call(
        gw, "POST", "/api/workflows/flow/runs", boss, skip_auto_headers=["Content-Type"]
    )
    assert status == 202, body


async def raw_request(port: int, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """A request written byte for byte (a client library would refuse to send these)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + b"Connection: close\r\n\r\n" + body)
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


async def test_headers_that_are_not_utf8_get_a_4xx_naming_them(
    gateway: Gateway, admin_file: Path
) -> None:
    gw = await gateway()
    port = gw.port
    host = f"Host: 127.0.0.1:{port}\r\n".encode()
    status, body = await raw_request(
        port, b"GET /api/runs HTTP/1.1\r\n" + host + b"Authorization: Bearer \xff\r\n"
    )
    assert status == 401 and b"the token is not UTF-8 text" in body
    status, body = await raw_request(port, b"GET /api/runs HTTP/1.1\r\nHost: \xff\r\n")
    assert status == 421 and json.loads(body)["host"] == "\\udcff"
    boss = root(admin_file)
    assert (await call(gw, "POST", "/api/workflows", boss, json=FLOW))[0] == 201
    status, body = await raw_request(
        port,
        b"POST /api/workflows/flow/runs HTTP/1.1\r\n"
        + host
        + f"Authorization: Bearer {boss}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 2\r\n"
        + b"Idempotency-Key: \xff\r\n",
        b"{}",
    )
    problems = json.loads(body)["problems"]
    assert status == 400 and problems == [
        {"path": "idempotencyKey", "message": "the Idempotency-Key header is not UTF-8"}
    ]
