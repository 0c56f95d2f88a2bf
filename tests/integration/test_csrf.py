"""Requests a page on another origin could make a browser send (CSRF): real requests to
gateways with tokens on and off, and the attack that was found, against a real stack with
HEDDLE_AUTH=none: a page elsewhere cancelling a run and starting a workflow with
``fetch(..., {mode: "no-cors"})``. The decision itself, as a table:
tests/unit/gateway/test_origin.py."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.support.gateway_apps import FLOW, Gateway, call, root
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway
from tests.support.origins import EVIL, NO_CORS
from tests.support.stack import REPO, Stack, StackFactory


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
