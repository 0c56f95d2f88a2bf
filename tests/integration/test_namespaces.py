"""Namespaces in the API (docs/namespaces.md): two teams on one real stack, each with its
own token. Everything of team A answers team B's token exactly as an object that does not
exist; lists show a token its own namespaces only; the same names live apart in each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from tests.support.gateway_apps import Gateway, root
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway
from tests.support.namespaces import answer, create_namespaces, granted_token
from tests.support.run_events import events
from tests.support.stack import Stack, StackFactory

FAILING = {"runId": "only-a", "steps": [{"id": "s", "command": "echo hi; exit 3"}]}
WORKFLOW = {"name": "etl-a", "steps": [{"id": "s", "command": "true"}]}


def both(path: str) -> tuple[str, str]:
    """A path asked in team A, and the same path in the caller's own namespace (team B)."""
    joiner = "&" if "?" in path else "?"
    return f"{path}{joiner}namespace=team-a", path


# Every route on one object: method, path, body. Team A has each; team B has none.
A_OBJECTS: list[tuple[str, str, Any]] = [
    ("GET", "/api/runs/only-a", None),
    ("GET", "/api/runs/only-a/steps", None),
    ("GET", "/api/runs/only-a/steps/s", None),
    ("GET", "/api/runs/only-a/steps/s/logs", None),
    ("GET", "/api/runs/only-a/steps/s/logs?follow=1", None),
    ("GET", "/api/runs/only-a/events", None),
    ("GET", "/workflow/only-a", None),
    ("POST", "/api/runs/only-a/cancel", None),
    ("POST", "/api/runs/only-a/retry", None),
    ("GET", "/api/workflows/etl-a", None),
    ("GET", "/api/workflows/etl-a/runs", None),
    ("GET", "/api/workflows/etl-a/grid", None),
    ("PATCH", "/api/workflows/etl-a", {"paused": True}),
    ("POST", "/api/workflows/etl-a/runs", {}),
    ("GET", "/api/semaphores/gate", None),
]


class Base:
    """Where a gateway answers (a Stack has ``base`` too)."""

    def __init__(self, base: str) -> None:
        self.base = base


async def json_of(
    s: Stack | Base, token: str, method: str, path: str, **kwargs: Any
) -> tuple[int, Any]:
    status, _, raw = await answer(s.base, token, method, path, **kwargs)
    return status, json.loads(raw)


async def test_team_b_sees_nothing_of_team_a(stack: StackFactory) -> None:
    s = await stack(runners=1)
    nc = await s.connect()
    await create_namespaces(nc, "team-a", "team-b")
    await nc.close()
    a_admin = await granted_token(s.base, s.admin_token, "a-admin", {"team-a": "admin"})
    a_op = await granted_token(s.base, s.admin_token, "a-op", {"team-a": "operator"})
    b_op = await granted_token(s.base, s.admin_token, "b-op", {"team-b": "operator"})
    # Team A's run (failed: it could be retried), workflow and semaphore; its token's own
    # namespace is team-a, so it need not name it.
    assert (await json_of(s, a_admin, "POST", "/api/runs", json=FAILING))[0] in (201, 202)
    assert (await json_of(s, a_admin, "POST", "/api/workflows", json=WORKFLOW))[0] == 201
    put = await json_of(s, a_admin, "PUT", "/api/semaphores/gate", json={"size": 3})
    assert put == (
        200,
        {"name": "gate", "namespace": "team-a", "size": 3, "holders": [], "waiting": []},
    )
    run = await s.wait_run("only-a?namespace=team-a")
    assert (run["runId"], run["namespace"], run["status"]) == ("only-a", "team-a", "failed")

    for method, path, body in A_OBJECTS:
        kwargs = {} if body is None else {"json": body}
        in_a, own = both(path)
        hidden = await answer(s.base, b_op, method, in_a, **kwargs)
        missing = await answer(s.base, b_op, method, own, **kwargs)
        if path == "/api/semaphores/gate":
            # An unknown semaphore is one of size 1, shown in the namespace asked for.
            assert hidden[:2] == missing[:2] and hidden[2] == missing[2].replace(
                b'"team-b"', b'"team-a"'
            ), (hidden, missing)
        else:
            assert hidden == missing, (method, path, hidden, missing)
            assert hidden[0] == 404, (method, path, hidden)
        if method == "GET" and "events" not in path and "follow" not in path:
            # Team A's own token reads it: the 404 above is the namespace's doing.
            seen = await answer(s.base, a_op, method, path)
            assert seen[0] == 200 and seen != hidden, (path, seen)
    assert (await json_of(s, a_op, "GET", "/api/semaphores/gate"))[1]["size"] == 3


async def test_lists_same_names_and_tokens_per_namespace(stack: StackFactory) -> None:
    s = await stack(runners=1)
    nc = await s.connect()
    await create_namespaces(nc, "team-a", "team-b")
    await nc.close()
    admin = s.admin_token
    a_admin = await granted_token(s.base, admin, "a-admin", {"team-a": "admin"})
    b_admin = await granted_token(s.base, admin, "b-admin", {"team-b": "admin"})
    b_view = await granted_token(s.base, admin, "b-view", {"team-b": "viewer"})
    # The same run id and workflow name in both namespaces, and one in default.
    for token, command in ((a_admin, "echo from-a"), (b_admin, "echo from-b")):
        doc = {"runId": "nightly-1", "steps": [{"id": "s", "command": command}]}
        assert (await json_of(s, token, "POST", "/api/runs", json=doc))[0] in (201, 202)
        assert (await json_of(s, token, "POST", "/api/workflows", json=WORKFLOW))[0] == 201
    assert (await json_of(s, admin, "POST", "/api/runs", json=FAILING))[0] in (201, 202)
    for ns, word in (("team-a", "from-a"), ("team-b", "from-b")):
        run = await s.wait_run(f"nightly-1?namespace={ns}")
        assert (run["runId"], run["namespace"], run["status"]) == ("nightly-1", ns, "succeeded")
        assert word in run["steps"][0]["stdoutTail"]

    status, listed = await json_of(s, b_view, "GET", "/api/runs")
    assert status == 200 and [(r["runId"], r["namespace"]) for r in listed["runs"]] == [
        ("nightly-1", "team-b")
    ]
    assert listed["total"] == 1
    status, listed = await json_of(s, admin, "GET", "/api/runs")
    assert {(r["runId"], r["namespace"]) for r in listed["runs"]} == {
        ("nightly-1", "team-a"),
        ("nightly-1", "team-b"),
        ("only-a", "default"),
    }
    status, flows = await json_of(s, b_view, "GET", "/api/workflows")
    assert [(w["name"], w["namespace"]) for w in flows["workflows"]] == [("etl-a", "team-b")]
    # A namespace the token may not see lists as one that does not exist.
    for path in ("/api/runs", "/api/workflows", "/api/semaphores"):
        hidden = await json_of(s, b_view, "GET", f"{path}?namespace=team-a")
        ghost = await json_of(s, b_view, "GET", f"{path}?namespace=team-z")
        assert hidden[0] == ghost[0] == 404
        assert hidden[1]["error"] == "namespace 'team-a' does not exist"
        assert json.dumps(hidden[1]).replace("team-a", "team-z") == json.dumps(ghost[1])
    # A viewer in team-b may not cancel there: 403 naming role and namespace.
    status, refused = await json_of(s, b_view, "POST", "/api/runs/nightly-1/cancel")
    assert status == 403 and "viewer" in refused["error"] and refused["needs"] == "operator"
    status, refused = await json_of(s, b_view, "POST", "/api/runs", json=FAILING)
    assert status == 403  # submitting needs admin, whatever the namespace

    # Writing to a namespace that does not exist.
    doc = {**FAILING, "namespace": "team-z"}
    status, body = await json_of(s, admin, "POST", "/api/runs", json=doc)
    assert (status, body["error"]) == (404, "namespace 'team-z' does not exist")

    # An old-style operator token: default alone.
    old = await json_of(s, admin, "POST", "/api/tokens", json={"name": "old", "role": "operator"})
    old_token = old[1]["token"]
    status, listed = await json_of(s, old_token, "GET", "/api/runs")
    assert [(r["runId"], r["namespace"]) for r in listed["runs"]] == [("only-a", "default")]
    assert (await json_of(s, old_token, "GET", "/api/runs/nightly-1"))[0] == 404
    hidden = await json_of(s, old_token, "GET", "/api/runs/nightly-1?namespace=team-a")
    assert hidden == (404, {"error": "run 'nightly-1' not found"})


async def test_a_namespace_admin_manages_its_own_tokens(
    gateway: Gateway, admin_file: Path, heddle_nc: Client
) -> None:
    gw = await gateway()
    s = Base(f"http://{gw.host}:{gw.port}")
    await create_namespaces(heddle_nc, "team-a", "team-b")
    admin = root(admin_file)
    a_admin = await granted_token(s.base, admin, "a-admin", {"team-a": "admin"})
    both_teams = {"team-a": "operator", "team-b": "viewer"}
    await granted_token(s.base, admin, "two", both_teams)
    made = await json_of(
        s, a_admin, "POST", "/api/tokens", json={"name": "ci-a", "namespaces": {"team-a": "viewer"}}
    )
    assert made[0] == 201 and made[1]["namespaces"] == {"team-a": "viewer"}
    assert made[1]["role"] == "viewer"
    for grants in ({"team-b": "viewer"}, both_teams):
        body = {"name": "nope", "namespaces": grants}
        status, refused = await json_of(s, a_admin, "POST", "/api/tokens", json=body)
        assert status == 403 and "'team-b'" in refused["error"], refused
    for body in ({"name": "nope", "role": "viewer"}, {"name": "nope", "role": "admin"}):
        assert (await json_of(s, a_admin, "POST", "/api/tokens", json=body))[0] == 403
    # It lists and revokes the tokens within team-a alone.
    status, listed = await json_of(s, a_admin, "GET", "/api/tokens")
    assert sorted(t["name"] for t in listed["tokens"]) == ["a-admin", "ci-a"]
    hidden = await json_of(s, a_admin, "POST", "/api/tokens/two/revoke")
    missing = await json_of(s, a_admin, "POST", "/api/tokens/ghost/revoke")
    assert hidden[0] == missing[0] == 404
    assert (await json_of(s, a_admin, "POST", "/api/tokens/ci-a/revoke"))[0] == 200
    # The system's admin sees every token, and their grants.
    status, listed = await json_of(s, admin, "GET", "/api/tokens")
    grants = {t["name"]: t["namespaces"] for t in listed["tokens"]}
    assert grants["two"] == both_teams and grants["admin"] == {}
    # Every problem of a request at once.
    bad = {"name": "v", "namespaces": {"bad name": "viewer", "team-a": "root", "team-z": "viewer"}}
    status, body = await json_of(s, admin, "POST", "/api/tokens", json=bad)
    assert status == 400
    assert sorted(p["path"] for p in body["problems"]) == [
        "namespaces.bad name",
        "namespaces.team-a",
        "namespaces.team-z",
    ]


async def test_the_pool_shows_what_a_runner_holds_to_its_namespace_alone(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    nc = await s.connect()
    try:
        await create_namespaces(nc, "team-a", "team-b")
    finally:
        await nc.close()
    a = await granted_token(s.base, s.admin_token, "a", {"team-a": "viewer"})
    b = await granted_token(s.base, s.admin_token, "b", {"team-b": "viewer"})
    hold = {"namespace": "team-a", "runId": "holding", "steps": [{"id": "s", "command": "sleep 5"}]}
    await s.submit(hold)
    await s.wait_step("holding?namespace=team-a", "s", {"running"})
    _, mine = await json_of(s, a, "GET", "/api/runners")
    [runner] = mine["runners"]
    assert (runner["status"], runner["stepId"]) == ("busy", "s")
    assert len(mine["leased"]) == 1
    status, _, raw = await answer(s.base, b, "GET", "/api/runners")
    theirs = json.loads(raw)
    assert status == 200 and theirs["runners"][0]["status"] == "busy"
    assert b"holding" not in raw and theirs["runners"][0].get("runId") is None
    assert theirs["leased"] == []


async def test_a_runs_event_stream_names_its_namespace(stack: StackFactory) -> None:
    s = await stack(runners=1)
    nc = await s.connect()
    try:
        await create_namespaces(nc, "team-a")
    finally:
        await nc.close()
    await s.submit(
        {"namespace": "team-a", "runId": "told", "steps": [{"id": "s", "command": "true"}]}
    )
    got = await events(s, "told", query="?namespace=team-a")
    told = [(kind, doc["runId"], doc["namespace"]) for kind, doc in got if kind in ("run", "end")]
    assert told[-1] == ("end", "told", "team-a")
    assert all(t[1:] == ("told", "team-a") for t in told)
