"""Webhook triggers (docs/webhooks.md) against a real stack: a delivery signed with its
hook's secret starts a run of the workflow's newest version with the parameters its
expressions take from the body, with no token; anything unsigned, signed wrong or over a
limit starts none; a repeated delivery id makes one run."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from heddle.shared.core.signatures import sign

from tests.support.gateway_apps import Gateway, GatewayClient, call, make_token, root
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway
from tests.support.stack import Stack, StackFactory, step_of

SHOW = 'printf "%s|%s|%s" "$HEDDLE_PARAM_REF" "$HEDDLE_PARAM_SHA" "$HEDDLE_PARAM_WHO"'
DEPLOY = {
    "name": "deploy",
    "params": [{"name": "ref"}, {"name": "sha"}, {"name": "who", "default": "nobody"}],
    "webhooks": [
        {
            "name": "push",
            "params": {
                "ref": "body.ref",
                "sha": "body.after",
                "who": 'body.pusher.name + "@" + headers["x-github-event"]',
            },
        },
        {"name": "plain", "params": {"ref": "body.ref", "sha": "string(body.n)"}},
        {"name": "burst", "params": {"ref": '"r"', "sha": '"s"'}},
    ],
    "steps": [{"id": "show", "command": SHOW}],
}
# A push event as GitHub sends it (trimmed of the fields no expression here reads).
GITHUB_PUSH: dict[str, Any] = {
    "ref": "refs/heads/main",
    "before": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
    "after": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
    "created": False,
    "deleted": False,
    "forced": False,
    "base_ref": None,
    "compare": "https://github.com/octo-org/hello/compare/0d1a26e67d8f...6113728f27ae",
    "commits": [
        {
            "id": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
            "message": "Fix the build",
            "timestamp": "2026-12-01T10:15:00+01:00",
            "author": {"name": "Mona Octocat", "email": "mona@example.com", "username": "mona"},
            "added": [],
            "removed": [],
            "modified": ["README.md"],
        }
    ],
    "head_commit": {"id": "6113728f27ae82c7b1a177c8d03f9e96e0adf246", "message": "Fix the build"},
    "repository": {
        "id": 1296269,
        "name": "hello",
        "full_name": "octo-org/hello",
        "private": False,
        "owner": {"login": "octo-org", "id": 1, "type": "Organization"},
        "default_branch": "main",
        "stargazers_count": 80,
    },
    "pusher": {"name": "mona", "email": "mona@example.com"},
    "sender": {"login": "mona", "id": 2, "type": "User"},
}


def github_headers(secret: str, body: bytes, delivery: str, event: str = "push") -> dict[str, str]:
    """What GitHub sends with a delivery (its own User-Agent, no token)."""
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/a1b2c3d",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Hook-ID": "292430182",
        "X-Hub-Signature-256": sign(secret, body),
    }


async def deliver(
    base: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, Any, dict[str, str]]:
    """A delivery as a sender makes it: no token, no cookie, a session of its own."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(base + path, data=body, headers=headers) as resp,
    ):
        answer = await resp.json() if resp.content_type == "application/json" else None
        return resp.status, answer, dict(resp.headers)


async def make_secret(s: Stack, hook: str) -> str:
    status, body = await s.request("POST", f"/api/workflows/deploy/webhooks/{hook}/secret")
    assert status == 201, body
    assert {k: body[k] for k in ("workflow", "namespace", "hook")} == {
        "workflow": "deploy",
        "namespace": "default",
        "hook": hook,
    }
    secret: str = body["secret"]
    return secret


async def run_ids(s: Stack) -> list[str]:
    status, body = await s.request("GET", "/api/workflows/deploy/runs?limit=1000")
    assert status == 200, body
    return sorted(r["runId"] for r in body["runs"])


async def test_signed_deliveries_start_runs_and_nothing_else_does(stack: StackFactory) -> None:
    s = await stack(runners=1, HEDDLE_WEBHOOK_MAX_BODY="4096")
    status, body = await s.request("POST", "/api/workflows", json=DEPLOY)
    assert status == 201, body
    # Before a secret is made, even a delivery signed with a guess is refused.
    raw = json.dumps({"ref": "refs/heads/x", "n": 1}).encode()
    guessed = {"X-Heddle-Signature-256": sign("guess", raw)}
    assert (await deliver(s.base, "/hooks/deploy/plain", raw, guessed))[0] == 401
    secret = await make_secret(s, "plain")

    # Heddle's own header; the body's number taken as text, the default kept.
    signed = {"Content-Type": "application/json", "X-Heddle-Signature-256": sign(secret, raw)}
    status, body, _ = await deliver(s.base, "/hooks/deploy/plain", raw, signed)
    assert status == 201, body
    assert (body["workflow"], body["namespace"], body["version"]) == ("deploy", "default", 1)
    run = await s.wait_run(body["runId"])
    assert run["status"] == "succeeded", run
    assert run["params"] == {"ref": "refs/heads/x", "sha": "1", "who": "nobody"}
    assert run["trigger"] == "webhook"
    assert step_of(run, "show")["stdoutTail"] == "refs/heads/x|1|nobody"

    # Without a delivery id, each delivery is a run of its own.
    status, again, _ = await deliver(s.base, "/hooks/deploy/plain", raw, signed)
    assert status == 201 and again["runId"] != body["runId"]
    before = await run_ids(s)
    assert len(before) == 2

    # Unsigned, signed wrong, signed with another body: 401, and no run.
    wrong = {"X-Heddle-Signature-256": sign(secret + "0", raw)}
    other = {"X-Heddle-Signature-256": sign(secret, raw + b" ")}
    for headers in ({}, wrong, other, {"X-Hub-Signature-256": "sha256=" + "0" * 64}):
        status, answer, _ = await deliver(s.base, "/hooks/deploy/plain", raw, headers)
        assert status == 401, (headers, answer)
        assert isinstance(answer["error"], str)
    # An expression that fails on this body: 400 naming the parameter, no run.
    no_n = json.dumps({"ref": "refs/heads/x"}).encode()
    signed_no_n = {"X-Heddle-Signature-256": sign(secret, no_n)}
    status, answer, _ = await deliver(s.base, "/hooks/deploy/plain", no_n, signed_no_n)
    assert status == 400, answer
    assert [p["path"] for p in answer["problems"]] == ["params.sha"]
    assert "n" in answer["problems"][0]["message"]
    # Not JSON: 400. Unknown hook or workflow: 404.
    text = b"ref=refs/heads/x"
    signed_text = {"X-Heddle-Signature-256": sign(secret, text)}
    assert (await deliver(s.base, "/hooks/deploy/plain", text, signed_text))[0] == 400
    assert (await deliver(s.base, "/hooks/deploy/nope", raw, signed))[0] == 404
    assert (await deliver(s.base, "/hooks/nope/plain", raw, signed))[0] == 404
    # Over HEDDLE_WEBHOOK_MAX_BODY: 413, signed or not, sent whole or in chunks.
    big = json.dumps({"ref": "x" * 5000, "n": 1}).encode()
    big_signed = {"X-Heddle-Signature-256": sign(secret, big)}
    assert (await deliver(s.base, "/hooks/deploy/plain", big, big_signed))[0] == 413

    async def chunks() -> Any:
        for _ in range(5):
            yield b" " * 1000

    async with (
        aiohttp.ClientSession() as session,
        session.post(s.base + "/hooks/deploy/plain", data=chunks(), headers=big_signed) as resp,
    ):
        assert resp.status == 413
    assert await run_ids(s) == before

    # A re-made secret replaces the old, which stops working at once.
    new_secret = await make_secret(s, "plain")
    assert new_secret != secret
    assert (await deliver(s.base, "/hooks/deploy/plain", raw, signed))[0] == 401
    fresh = {"X-Heddle-Signature-256": sign(new_secret, raw)}
    assert (await deliver(s.base, "/hooks/deploy/plain", raw, fresh))[0] == 201
    assert len(await run_ids(s)) == 3


async def test_a_github_push_and_its_redelivery_make_one_run(stack: StackFactory) -> None:
    s = await stack(runners=1, HEDDLE_WEBHOOK_RATE="3")
    status, body = await s.request("POST", "/api/workflows", json=DEPLOY)
    assert status == 201, body
    secret = await make_secret(s, "push")
    raw = json.dumps(GITHUB_PUSH, indent=2).encode()  # as GitHub sends it, not compact
    delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"

    # GitHub's ping, when the webhook is made: answered, no run.
    ping = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 292430182}).encode()
    status, body, _ = await deliver(
        s.base, "/hooks/deploy/push", ping, github_headers(secret, ping, "p-1", event="ping")
    )
    assert status == 200 and body["pong"] is True, body
    assert await run_ids(s) == []

    status, first, _ = await deliver(
        s.base, "/hooks/deploy/push", raw, github_headers(secret, raw, delivery)
    )
    assert status == 201, first
    run = await s.wait_run(first["runId"])
    assert run["status"] == "succeeded", run
    sha = GITHUB_PUSH["after"]
    assert run["params"] == {"ref": "refs/heads/main", "sha": sha, "who": "mona@push"}
    assert step_of(run, "show")["stdoutTail"] == f"refs/heads/main|{sha}|mona@push"
    # GitHub's "Redeliver": the same id, the same run, no second one.
    status, again, _ = await deliver(
        s.base, "/hooks/deploy/push", raw, github_headers(secret, raw, delivery)
    )
    assert status in (200, 201) and again["runId"] == first["runId"], again
    assert again.get("created") is False
    assert await run_ids(s) == [first["runId"]]

    # Each hook takes HEDDLE_WEBHOOK_RATE deliveries a minute, then 429 with Retry-After.
    burst = await make_secret(s, "burst")
    one = b"{}"
    headers = {"X-Heddle-Signature-256": sign(burst, one)}
    answers = [await deliver(s.base, "/hooks/deploy/burst", one, headers) for _ in range(4)]
    assert [a[0] for a in answers] == [201, 201, 201, 429]
    assert int(answers[3][2]["Retry-After"]) >= 1
    assert len(await run_ids(s)) == 4
    # Another hook's deliveries are counted apart.
    assert (await deliver(s.base, "/hooks/deploy/push", raw, github_headers(secret, raw, "2")))[
        0
    ] == 201


async def test_the_secret_routes(gateway: Gateway, admin_file: Any) -> None:
    """Admins make secrets, in the workflow's namespace; an operator may not."""
    gw: GatewayClient = await gateway()
    admin = root(admin_file)
    doc = {
        **DEPLOY,
        "notify": [
            {"url": "https://ci.example.com/heddle"},
            {"url": "https://x.example.com", "secret": True},
        ],
    }
    assert (await call(gw, "POST", "/api/workflows", admin, json=doc))[0] == 201
    operator = await make_token(gw, admin_file, "ops", "operator")
    path = "/api/workflows/deploy/webhooks/push/secret"
    status, body = await call(gw, "POST", path, operator)
    assert status == 403 and body["needs"] == "admin", body
    assert (await call(gw, "POST", path))[0] == 401
    status, body = await call(gw, "POST", path, admin)
    assert status == 201 and len(body["secret"]) == 64, body
    for missing in (
        "/api/workflows/deploy/webhooks/nope/secret",
        "/api/workflows/nope/webhooks/push/secret",
    ):
        assert (await call(gw, "POST", f"/api/workflows/{missing}/secret", admin))[0] == 404
    # A notify target's: only one that signs.
    status, body = await call(gw, "POST", "/api/workflows/deploy/notify/1/secret", admin)
    assert status == 201 and body["index"] == 1 and len(body["secret"]) == 64, body
    assert (await call(gw, "POST", "/api/workflows/deploy/notify/0/secret", admin))[0] == 409
    assert (await call(gw, "POST", "/api/workflows/deploy/notify/2/secret", admin))[0] == 404
    # A webhook's parameter that is no CEL, or not a parameter: 400 listing each.
    bad = {
        **DEPLOY,
        "webhooks": [{"name": "push", "params": {"ref": "body.ref ==", "sha": "x.y", "nope": "1"}}],
    }
    status, body = await call(gw, "POST", "/api/workflows", admin, json=bad)
    assert status == 400, body
    assert [p["path"] for p in body["problems"]] == [
        "webhooks[0].params.ref",
        "webhooks[0].params.sha",
        "webhooks[0].params.nope",
    ]
    # A run's own document takes no webhooks.
    inline = {"steps": DEPLOY["steps"], "webhooks": DEPLOY["webhooks"]}
    status, body = await call(gw, "POST", "/api/runs", admin, json=inline)
    assert status == 400 and [p["path"] for p in body["problems"]] == ["webhooks"], body


async def test_a_namespaced_workflows_hook(gateway: Gateway, admin_file: Any) -> None:
    """A workflow in a namespace takes deliveries at ?namespace=, and starts its run there;
    the same path in another namespace is another workflow."""
    gw = await gateway()
    admin = root(admin_file)
    assert (await call(gw, "PUT", "/api/namespaces/team-a", admin, json={}))[0] == 200
    doc = {**DEPLOY, "namespace": "team-a"}
    assert (await call(gw, "POST", "/api/workflows", admin, json=doc))[0] == 201
    path = "/api/workflows/deploy/webhooks/push/secret"
    assert (await call(gw, "POST", path, admin))[0] == 404  # not in default
    status, made = await call(gw, "POST", path + "?namespace=team-a", admin)
    assert status == 201 and made["namespace"] == "team-a", made
    raw = json.dumps(GITHUB_PUSH).encode()
    base = f"http://127.0.0.1:{gw.port}"
    headers = github_headers(made["secret"], raw, "d-1")
    status, body, _ = await deliver(base, "/hooks/deploy/push?namespace=team-a", raw, headers)
    assert status in (201, 202) and body["namespace"] == "team-a", body  # no orchestrator here
    assert (await deliver(base, "/hooks/deploy/push", raw, headers))[0] == 404
    # A page elsewhere gains nothing from the route's lack of origin check: it cannot sign.
    page = {**headers, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    page["X-Hub-Signature-256"] = sign("guess", raw)
    assert (await deliver(base, "/hooks/deploy/push?namespace=team-a", raw, page))[0] == 401
