"""Requests a page on another origin could make a browser send (CSRF): the decision as a
table (services/gateway/http/origin.py), then real requests to gateways with tokens on and off,
and the attack that was found, against a real stack with HEDDLE_AUTH=none: a page elsewhere
cancelling a run and starting a workflow with ``fetch(..., {mode: "no-cors"})``."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from heddle.services.gateway.http.origin import cross_origin_refusal, same_origin

from tests.conftest import StackFactory
from tests.gateway_apps import FLOW, Gateway, call, root
from tests.gateway_apps import admin_file as admin_file  # fixtures
from tests.gateway_apps import gateway as gateway
from tests.stack import REPO, Stack

HOST = "127.0.0.1:8080"
OWN = "http://127.0.0.1:8080"
EVIL = "http://evil.example"
JSON = {"Content-Type": "application/json"}
# What Chromium sends with fetch(url, {method: "POST", mode: "no-cors"}) from another site.
NO_CORS = {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}
# What it sends with the page's own fetch calls.
PAGE = {"Origin": OWN, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}

ALLOWED = [
    ("GET", NO_CORS),  # reads change nothing
    ("HEAD", NO_CORS),
    ("OPTIONS", NO_CORS),
    ("POST", {}),  # curl -XPOST, the heddle command line's cancel: no body, no browser
    ("POST", {"Content-Type": "text/plain"}),  # not a browser: the 415 is another check's
    ("DELETE", {}),
    ("POST", JSON),
    ("POST", PAGE),  # the page's cancel and retry: no body
    ("PATCH", {**PAGE, **JSON}),
    ("POST", {"Origin": OWN}),  # a browser without fetch metadata (Safari before 16.4)
    ("POST", {"Origin": "https://127.0.0.1:8080"}),  # behind a TLS proxy
    ("POST", {"origin": OWN, "sec-fetch-site": "same-origin"}),  # names in any case
    ("POST", {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}),
    ("POST", {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}),  # the user's own
    ("POST", {"Sec-Fetch-Mode": "cors", "Content-Type": "application/json; charset=utf-8"}),
]
REFUSED = [
    ("POST", NO_CORS),  # the attack
    ("post", NO_CORS),
    ("PUT", NO_CORS),
    ("PATCH", NO_CORS),
    ("DELETE", NO_CORS),
    ("POST", {**NO_CORS, **JSON}),  # an explicit foreign origin, whatever the body
    ("POST", {"Origin": EVIL}),  # a browser without fetch metadata
    ("POST", {"Origin": EVIL, **JSON}),
    ("POST", {"Origin": "null"}),  # a sandboxed frame, a file:// page
    ("POST", {"Origin": "http://127.0.0.1:8081"}),  # another port is another origin
    ("POST", {"Origin": "http://localhost:8080"}),  # the same machine by another name
    ("POST", {"Origin": "http://127.0.0.1"}),
    ("POST", {"Sec-Fetch-Site": "cross-site"}),
    ("POST", {"Sec-Fetch-Site": "same-site", **JSON}),  # a sibling subdomain
    ("POST", {"Origin": OWN, "Sec-Fetch-Site": "cross-site"}),
    ("POST", {"Origin": EVIL, "Sec-Fetch-Site": "same-origin"}),
    ("POST", {"Sec-Fetch-Mode": "no-cors"}),  # a browser that does not say where from
    ("POST", {"Sec-Fetch-Dest": "empty", "Content-Type": "text/plain"}),
    ("POST", {"Sec-Fetch-Site": "unheard-of", "Sec-Fetch-Mode": "cors"}),
]


@pytest.mark.parametrize(("method", "headers"), ALLOWED)
def test_allowed(method: str, headers: dict[str, str]) -> None:
    assert cross_origin_refusal(method, headers, HOST) is None


@pytest.mark.parametrize(("method", "headers"), REFUSED)
def test_refused(method: str, headers: dict[str, str]) -> None:
    assert cross_origin_refusal(method, headers, HOST) is not None


def test_no_origin_is_own_when_the_host_is_not_the_gateway_s() -> None:
    assert cross_origin_refusal("POST", {"Origin": OWN}, None) is not None
    assert cross_origin_refusal("POST", {}, None) is None  # not a browser


@pytest.mark.parametrize(
    ("origin", "host", "own"),
    [
        ("http://127.0.0.1:8080", "127.0.0.1:8080", True),
        ("http://LOCALHOST:8080", "localhost:8080", True),
        ("http://heddle.example.com", "heddle.example.com", True),
        ("http://heddle.example.com:80", "heddle.example.com", True),
        ("https://heddle.example.com", "heddle.example.com", True),
        ("https://heddle.example.com", "heddle.example.com:443", True),
        ("http://[::1]:8080", "[::1]:8080", True),
        ("http://heddle.example.com", "heddle.example.com:443", False),
        ("http://heddle.example.com.evil.example", "heddle.example.com", False),
        ("http://evil.example", "heddle.example.com", False),
        ("http://127.0.0.1:8080/path", "127.0.0.1:8080", False),
        ("null", "127.0.0.1:8080", False),
        ("file://", "127.0.0.1:8080", False),
        ("ftp://127.0.0.1:8080", "127.0.0.1:8080", False),
        ("http://127.0.0.1:99999", "127.0.0.1:99999", False),
        ("http://[::1", "[::1", False),
        ("http://127.0.0.1:8080", "", False),
        ("http://127.0.0.1:8080", None, False),
    ],
)
def test_same_origin(origin: str, host: str | None, own: bool) -> None:
    assert same_origin(origin, host) is own


# ---- real requests ---------------------------------------------------------------------------


@pytest.mark.parametrize("auth", ["tokens", "none"])
async def test_a_gateway_refuses_cross_site_changes_with_tokens_on_and_off(
    gateway: Gateway, admin_file: Path, auth: str
) -> None:
    gw = await gateway(auth=auth)
    token = root(admin_file)  # sent even with tokens on: the check comes before it
    own = f"http://127.0.0.1:{gw.port}"
    assert (await call(gw, "POST", "/api/workflows", token, json=FLOW))[0] == 201
    bare = {"skip_auto_headers": ["Content-Type"]}
    for method, path, kwargs in (
        ("POST", "/api/workflows/flow/runs", bare),
        ("POST", "/api/runs/r1/cancel", bare),
        ("POST", "/api/runs/r1/retry", bare),
        ("PATCH", "/api/workflows/flow", {"json": {"paused": True}}),
        ("POST", "/api/runs", {"json": FLOW}),
    ):
        for foreign in (NO_CORS, {"Origin": EVIL}, {"Sec-Fetch-Site": "same-site"}):
            status, body = await call(gw, method, path, token, headers=foreign, **kwargs)
            assert status == 403 and isinstance(body["error"], str), (method, path, foreign)
    status, body = await call(gw, "GET", "/api/workflows/flow", token)
    assert status == 200 and body["paused"] is False  # the PATCH never ran
    # The page's own calls, and a program's, go on.
    page = {"Origin": own, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}
    assert (await call(gw, "POST", "/api/workflows/flow/runs", token, headers=page, **bare))[
        0
    ] == 202
    assert (await call(gw, "POST", "/api/workflows/flow/runs", token, **bare))[0] == 202
    status, _ = await call(
        gw, "PATCH", "/api/workflows/flow", token, headers=page, json={"paused": True}
    )
    assert status == 200
    assert (await call(gw, "GET", "/api/runs", token, headers=NO_CORS))[0] == 200


async def heddle(s: Stack, *args: str) -> tuple[int, str]:
    """The heddle command line, as a user runs it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "heddle.services.cli",
        *args,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "HEDDLE_URL": s.base, "HEDDLE_TOKEN": s.admin_token},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_a_page_elsewhere_cannot_cancel_or_start_runs_on_an_open_gateway(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2, HEDDLE_AUTH="none")
    await s.submit({"runId": "long", "steps": [{"id": "S", "command": "sleep 30"}]})
    await s.wait_step("long", "S", {"running"})
    assert (await s.request("POST", "/api/workflows", json=FLOW))[0] == 201
    bare = {"skip_auto_headers": ["Content-Type"], "headers": NO_CORS}
    status, _ = await s.request("POST", "/api/runs/long/cancel", **bare)
    assert status == 403
    status, _ = await s.request("POST", "/api/workflows/flow/runs", **bare)
    assert status == 403
    assert (await s.run("long"))["status"] == "running"
    # A run started the right way is the workflow's only one.
    status, body = await s.request("POST", "/api/workflows/flow/runs", json={})
    assert status in (201, 202), body
    runs, _ = await s.wait_history("flow", succeeded=1)
    assert len(runs) == 1, json.dumps(runs)
    # The command line's cancel (no body, no Origin) still works.
    rc, out = await heddle(s, "cancel", "long")
    assert rc == 0, out
    assert (await s.wait_run("long"))["status"] == "cancelled"
