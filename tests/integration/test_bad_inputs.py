"""Bad input over HTTP (issue 16): the right status, a JSON 4xx naming every problem, never a
500, and nothing stored; through gateway apps on aiohttp's TestServer over a real nats-server
(tests/support/gateway_apps.py)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import nats
import pytest
from heddle.services.gateway.http.answers import MAX_LISTED_PROBLEMS
from heddle.services.gateway.http.inputs import HEADER_ROOM
from heddle.services.gateway.http.keys import NATS
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.broker.documents import INLINE_MAX
from heddle.shared.core.validation import Limits, parse_run_request
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import SubmitRun, encode
from heddle.shared.wire.json_depth import MAX_JSON_DEPTH
from heddle.shared.wire.timefmt import now_rfc3339

from tests.support.gateway_apps import FLOW, Gateway, GatewayClient, bearer, call, root
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway
from tests.support.stack import freeze

STEP = "/api/runs/r1/steps/a"
FIVE_THOUSAND_DIGITS = "9" * 5000
# Every route that reads a JSON body.
BODY_ROUTES = [
    ("POST", "/api/runs"),
    ("POST", "/workflow"),
    ("POST", "/api/workflows"),
    ("PATCH", "/api/workflows/flow"),
    ("POST", "/api/workflows/flow/runs"),
    ("POST", "/api/tokens"),
]


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


async def post_raw(gw: GatewayClient, method: str, path: str, token: str, body: bytes) -> Any:
    headers = {"Content-Type": "application/json"}
    # A file-like body: aiohttp warns about large bytes bodies.
    return await call(gw, method, path, token, data=io.BytesIO(body), headers=headers)


async def post_json(gw: GatewayClient, path: str, token: str, doc: Any) -> Any:
    return await post_raw(gw, "POST", path, token, json.dumps(doc).encode())


def problem_paths(body: dict[str, Any]) -> list[str]:
    return [p["path"] for p in body.get("problems", [])]


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

    def __init__(self, gw: GatewayClient, admin_file: Path) -> None:
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


async def test_json_nested_1000_deep_is_400_on_every_body_route(
    gateway: Gateway, admin_file: Path
) -> None:
    gw = await gateway()
    token = root(admin_file)
    for method, path in BODY_ROUTES:
        status, body = await post_raw(gw, method, path, token, nested(1000))
        assert status == 400, (method, path, body)
        assert f"more than {MAX_JSON_DEPTH} levels" in body["error"], body
    # At the bound the body is decoded (and refused for what it is, not for its depth).
    deep_ok = b'{"steps": [{"id": "a", "command": "true"}], "description": %s}'
    status, body = await post_raw(gw, "POST", "/api/runs", token, deep_ok % nested(63))
    assert (status, problem_paths(body)) == (400, ["description"]), body
    status, body = await post_raw(gw, "POST", "/api/runs", token, deep_ok % nested(64))
    assert status == 400 and "levels" in body["error"], body


@pytest.mark.parametrize(
    ("path", "headers", "name"),
    [
        (f"{STEP}?tail=²", {}, "tail"),
        (f"{STEP}?tail=٣", {}, "tail"),  # a Unicode digit int() takes
        (f"{STEP}/logs?after=²", {}, "after"),
        (f"{STEP}/logs?follow=1", {"Last-Event-ID": "²"}, "Last-Event-ID"),
        (f"{STEP}?tail={FIVE_THOUSAND_DIGITS}", {}, "tail"),
        (f"{STEP}/logs?after={FIVE_THOUSAND_DIGITS}", {}, "after"),
        (f"{STEP}/logs?follow=1", {"Last-Event-ID": FIVE_THOUSAND_DIGITS}, "Last-Event-ID"),
        (f"/api/runs?limit={FIVE_THOUSAND_DIGITS}", {}, "limit"),
        (f"/api/workflows/flow/runs?limit={FIVE_THOUSAND_DIGITS}", {}, "limit"),
        ("/api/workflows/flow?version=٣", {}, "version"),
    ],
)
async def test_numbers_are_parsed_strictly(
    gateway: Gateway, admin_file: Path, path: str, headers: dict[str, str], name: str
) -> None:
    gw = await gateway()
    status, body = await call(gw, "GET", path, root(admin_file), headers=headers)
    assert status == 400, body
    assert body["error"] == f"invalid {name}"
    assert problem_paths(body) == [name]
    assert body["problems"][0]["message"].startswith(f"{name} must be a whole number")
    assert len(body["problems"][0]["message"]) < 200  # 5,000 digits are not repeated


@pytest.mark.parametrize("timezone", ["Europe", "E" * 5000, "Europe/" + "x" * 300])
async def test_timezones_are_checked_against_the_known_list(
    gateway: Gateway, admin_file: Path, timezone: str
) -> None:
    gw = await gateway()
    doc = {**FLOW, "schedule": "0 6 * * *", "timezone": timezone}
    status, body = await call(gw, "POST", "/api/workflows", root(admin_file), json=doc)
    assert status == 400 and problem_paths(body) == ["timezone"], body
    assert "unknown timezone" in body["problems"][0]["message"]


@pytest.mark.parametrize(
    ("schedule", "words"),
    [
        ("1-0 * * * *", ["minute field", "reversed"]),
        ("* * * * *\n", ["'\\n'", "one line"]),
        ("R * * * *", ["minute field", "'R'"]),
        ("0 0 * * FRI-MON", ["day of week field", "reversed"]),
    ],
)
async def test_cron_fields_are_checked(
    gateway: Gateway, admin_file: Path, schedule: str, words: list[str]
) -> None:
    gw = await gateway()
    doc = {**FLOW, "schedule": schedule}
    status, body = await call(gw, "POST", "/api/workflows", root(admin_file), json=doc)
    assert status == 400 and problem_paths(body) == ["schedule"], body
    for word in words:
        assert word in body["problems"][0]["message"], body


async def test_a_nul_byte_in_a_command_is_refused(gateway: Gateway, admin_file: Path) -> None:
    gw = await gateway()
    steps = [{"id": "a", "command": "true"}, {"id": "b", "command": "echo a\x00b"}]
    for path in ("/api/runs", "/api/workflows"):
        status, body = await call(gw, "POST", path, root(admin_file), json={**FLOW, "steps": steps})
        assert status == 400 and problem_paths(body) == ["steps[1].command"], body
        assert "NUL" in body["problems"][0]["message"]


def big_steps(size: int) -> list[dict[str, str]]:
    return [{"id": f"s{i}", "command": "echo " + "x" * 15000} for i in range(size // 15000 + 1)]


async def test_a_workflow_over_the_payload_limit_is_413_and_not_written(
    gateway: Gateway, admin_file: Path
) -> None:
    gw = await gateway()
    token = root(admin_file)
    limit = gw.app[NATS].max_payload
    doc = {"name": "huge", "steps": big_steps(limit)}
    status, body = await post_json(gw, "/api/workflows", token, doc)
    assert status == 413, body
    assert "encodes to" in body["error"] and problem_paths(body) == ["steps"]
    assert (await call(gw, "GET", "/api/workflows/huge", token))[0] == 404
    status, body = await call(gw, "GET", "/api/workflows", token)
    assert (status, body["workflows"]) == (200, [])
    # The same steps as a run are carried beside the submit command (shared/broker/documents.py):
    # accepted (no orchestrator here: 202), the command small, the document in HEDDLE_DOCS.
    status, body = await post_json(gw, "/api/runs", token, {"steps": doc["steps"]})
    assert status == 202, body
    js = gw.app[NATS].jetstream()
    cmd = await js.get_last_msg(names.CMD_STREAM, names.CMD_SUBMIT_ALL + ".*")
    assert len(cmd.data) < 1024 and b'"document"' in cmd.data
    assert (await js.stream_info(names.DOCS_STREAM)).state.bytes > limit


def submit_size(doc: dict[str, Any]) -> int:
    """What the gateway will publish for ``doc`` (handlers/runs.create_run), in bytes."""
    req = parse_run_request(doc, Limits())
    cmd = SubmitRun(run_id=doc["runId"], steps=req.steps, submitted_at=now_rfc3339())
    return len(encode(cmd))


def run_of_size(size: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"runId": "edge", "steps": big_steps(size - 16_000)}
    doc["steps"].append({"id": "last", "command": "echo "})
    doc["steps"][-1]["command"] += "x" * (size - submit_size(doc))
    assert submit_size(doc) == size
    return doc


async def test_a_submit_the_server_would_refuse_in_one_message_is_carried_beside_it(
    gateway: Gateway, admin_file: Path
) -> None:
    # The server counts headers in its limit and drops the connection past it; the client
    # checks the payload alone. A payload just under the limit must not be sent as one
    # message: it goes to HEDDLE_DOCS in chunks, as does any above INLINE_MAX.
    gw = await gateway()
    token = root(admin_file)
    nc = gw.app[NATS]
    doc = run_of_size(nc.max_payload - 10)
    status, body = await post_json(gw, "/api/runs", token, doc)
    assert status == 202, body
    assert nc.is_connected and (await call(gw, "GET", "/readyz"))[0] == 200
    fits = {**run_of_size(nc.max_payload - HEADER_ROOM), "runId": "fits"}
    assert (await post_json(gw, "/api/runs", token, fits))[0] == 202
    small = {"runId": "small", "steps": big_steps(INLINE_MAX - 20_000)}
    assert (await post_json(gw, "/api/runs", token, small))[0] == 202
    js = nc.jetstream()
    cmd = await js.get_last_msg(names.CMD_STREAM, names.CMD_SUBMIT_ALL + ".*")
    assert b'"document"' not in cmd.data and len(cmd.data) > INLINE_MAX - 20_000
    # Chunks of at most a message less its header room: two for the first, one for the next.
    assert (await js.stream_info(names.DOCS_STREAM)).state.messages == 3


async def test_an_unknown_method_gets_the_json_error_shape(
    gateway: Gateway, admin_file: Path
) -> None:
    gw = await gateway()
    status, body = await call(gw, "FOO", "/api/runs", root(admin_file))
    assert status == 400 and isinstance(body, dict), body
    assert body["error"].startswith("bad request line") and "GET" in body["error"]


async def raw_exchange(gw: GatewayClient, request: bytes) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_connection(gw.host, gw.port)
    try:
        writer.write(request)
        head, _, body = (await asyncio.wait_for(reader.read(), 5)).partition(b"\r\n\r\n")
    finally:
        writer.close()
    return head, body


@pytest.mark.parametrize(
    ("request_bytes", "words"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nBad Header\r\n\r\n", b"bad request"),
        (b"GARBAGE\r\n\r\n", b"bad request line"),
    ],
)
async def test_a_malformed_request_gets_the_json_error_shape(
    gateway: Gateway, request_bytes: bytes, words: bytes
) -> None:
    gw = await gateway()
    head, body = await raw_exchange(gw, request_bytes)
    assert head.split(b"\r\n")[0].endswith(b" 400 Bad Request"), head
    assert b"Content-Type: application/json" in head, head
    assert body.startswith(b'{"error":"' + words), body


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
async def test_a_body_that_stalls_is_cut_with_408(
    gateway: Gateway, admin_file: Path, method: str, path: str
) -> None:
    gw = await gateway(body_timeout=0.3)
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {root(admin_file)}\r\nContent-Length: 1000\r\n\r\n"
    )
    # Ten bytes of the thousand announced, then nothing: the gateway must not wait forever.
    reader, writer = await asyncio.open_connection(gw.host, gw.port)
    try:
        writer.write(head.encode() + b'{"steps":[')
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(answer.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        body = await reader.readexactly(length)
    finally:
        writer.close()
    assert b"Connection: close" in answer
    assert answer.split(b"\r\n")[0].endswith(b" 408 Request Timeout"), answer
    assert b"HEDDLE_BODY_TIMEOUT" in json.loads(body)["error"].encode()


async def test_nats_too_slow_to_answer_is_503_with_retry_after(
    gateway: Gateway, admin_file: Path, own_nats_server: EmbeddedNats
) -> None:
    gw = await gateway(nats_timeout=1.0)  # HEDDLE_NATS_TIMEOUT: the 503 comes after it
    token = root(admin_file)
    assert (await call(gw, "GET", "/api/runs/r1", token))[0] == 404
    freeze(own_nats_server.proc.pid)  # the server holds the connection, answers nothing
    try:
        asked = time.monotonic()
        async with gw.get("/api/runs/r1", headers=bearer(token)) as resp:
            assert resp.status == 503 and resp.headers["Retry-After"].isdigit()
            assert "NATS" in (await resp.json())["error"]
        assert time.monotonic() - asked < 5.0  # its own timeout, not the default 10 s
    finally:
        os.kill(own_nats_server.proc.pid, signal.SIGCONT)
    assert (await call(gw, "GET", "/api/runs/r1", token))[0] == 404  # and it recovers


async def test_an_answer_lists_a_thousand_problems_and_counts_the_rest(
    gateway: Gateway, admin_file: Path
) -> None:
    """A small document can hold millions of problems: the answer stays small."""
    gw = await gateway()
    steps = [{"id": "a", "command": "true", "dependsOn": [f"n{i}" for i in range(2500)]}]
    status, body = await call(gw, "POST", "/api/runs", root(admin_file), json={"steps": steps})
    assert status == 400
    assert len(body["problems"]) == MAX_LISTED_PROBLEMS == 1000
    assert body["problems"][-1] == {
        "path": "steps[0].dependsOn[999]",
        "message": "unknown step 'n999'",
    }
    assert body["problemsNotListed"] == 1500
