"""The client's calls without I/O (shared/api/calls.py, request.py): the path, query and
body of each route as the gateway reads them, the namespace added, answers decoded into the
gateway's types, and refusals made into typed errors naming every problem. Against a real stack:
tests/integration/test_client.py."""

from __future__ import annotations

import json

import msgspec
import pytest
from heddle.shared.api import calls, methods
from heddle.shared.api.errors import BadDocument, Refused, Unreachable
from heddle.shared.api.request import Connection, answer_of, prepare, quote, refusal
from heddle.shared.wire.contracts import ApprovalDecision


def test_ids_and_values_are_one_path_segment_each() -> None:
    assert quote("a/b c?é") == "a%2Fb%20c%3F%C3%A9"
    assert calls.run("r/1").path == "/api/runs/r%2F1"
    assert calls.step("r", "s#1", tail=0).path == "/api/runs/r/steps/s%231?tail=0"
    assert calls.runs("failed", 5).path == "/api/runs?limit=5&status=failed"
    assert calls.runs().path == "/api/runs"
    assert calls.logs("r", "s", after=7).path == "/api/runs/r/steps/s/logs?after=7"
    assert calls.follow("r", "s").path == "/api/runs/r/steps/s/logs?follow=1"
    assert calls.run_events("r", "none").path == "/api/runs/r/events?steps=none"
    assert calls.history("etl", before="c 1").path == "/api/workflows/etl/runs?before=c%201"


def test_a_trigger_sends_only_what_is_given() -> None:
    bare = calls.trigger("etl")
    assert (bare.method, bare.path, bare.body) == ("POST", "/api/workflows/etl/runs", None)
    full = calls.trigger("etl", {"day": "mon"}, key="k1", scheduled_for="2026-01-01T00:00:00Z")
    assert full.body == {
        "idempotencyKey": "k1",
        "params": {"day": "mon"},
        "scheduledFor": "2026-01-01T00:00:00Z",
    }
    assert calls.trigger("etl", priority=-3).body == {"priority": -3}


def test_a_gate_is_answered_with_its_comment_if_one_is_given() -> None:
    yes = calls.decide("r", "gate", True, None)
    assert (yes.method, yes.path, yes.body) == ("POST", "/api/runs/r/steps/gate/approve", None)
    no = calls.decide("r", "gate", False, "not today")
    assert (no.path, no.body) == ("/api/runs/r/steps/gate/reject", {"comment": "not today"})
    decision = (
        b'{"approved": false, "by": "ops", "decidedAt": "2026-01-01T00:00:00Z", "comment": "x"}'
    )
    raw = b'{"runId": "r", "namespace": "default", "stepId": "gate", "attempt": 1, "decision": %s}'
    answer = no.answer(raw % decision)
    assert (answer.step_id, answer.attempt) == ("gate", 1)
    assert answer.decision == ApprovalDecision(
        approved=False, by="ops", decided_at="2026-01-01T00:00:00Z", comment="x"
    )


def test_a_request_carries_the_token_the_namespace_and_json() -> None:
    conn = Connection("http://gw:8080", "tok", "team-a")
    wire = prepare(conn, "POST", "/api/runs", {"steps": []})
    assert wire.url == "http://gw:8080/api/runs?namespace=team-a"
    assert json.loads(wire.data or b"") == {"namespace": "team-a", "steps": []}
    assert wire.headers == {
        "Accept": "application/json",
        "Authorization": "Bearer tok",
        "Content-Type": "application/json",
    }
    read = prepare(Connection("http://gw", None), "GET", "/api/runs", accept="text/event-stream")
    assert (read.data, read.headers) == (None, {"Accept": "text/event-stream"})


def test_a_refusal_names_the_error_and_every_problem() -> None:
    body = {
        "error": "invalid workflow",
        "problems": [{"path": "steps[0].id", "message": "bad id"}, {"path": "", "message": "x"}],
    }
    refused = refusal(400, json.dumps(body).encode())
    assert isinstance(refused, Refused)
    assert (refused.status, refused.error) == (400, "invalid workflow")
    assert [(p.path, p.message) for p in refused.problems] == [("steps[0].id", "bad id"), ("", "x")]
    assert str(refused) == "HTTP 400: invalid workflow\n  steps[0].id: bad id\n  (body): x"
    proxy = refusal(502, b"<html>bad gateway</html>")
    assert (proxy.status, proxy.problems, str(proxy)) == (
        502,
        [],
        "HTTP 502: <html>bad gateway</html>",
    )


def test_an_answer_that_is_not_the_route_s_is_unreachable() -> None:
    call = calls.runs()
    listed = call.answer(b'{"runs": [], "total": 0, "matching": 0, "limit": 20}')
    assert listed.runs == [] and listed.limit == 20
    with pytest.raises(Unreachable, match="a broken answer to GET /api/runs"):
        answer_of(call, "http://gw", b'{"runs": []}')
    with pytest.raises(Unreachable):
        answer_of(call, "http://gw", b"<html>")


def test_logs_of_one_attempt_keep_that_attempt_s_lines() -> None:
    line = {"cursor": 1, "seq": 1, "stream": "stdout", "time": "t", "text": "x"}
    dump = {
        "runId": "r",
        "namespace": "default",
        "stepId": "s",
        "status": "succeeded",
        "attempt": 2,
        "lines": [{**line, "attempt": 1}, {**line, "attempt": 2, "text": "y"}],
        "cursor": 9,
        "logsExpired": False,
    }
    raw = msgspec.json.encode(dump)
    assert [x.text for x in calls.logs("r", "s", attempt=2).answer(raw).lines] == ["y"]
    assert len(calls.logs("r", "s").answer(raw).lines) == 2


def test_a_document_given_as_an_object_is_checked_and_left_as_it_was() -> None:
    flow = {"steps": [{"id": "a", "command": "true"}]}
    call = methods.submit(flow, run_id="r9", priority=2)
    assert (call.method, call.path) == ("POST", "/api/runs")
    assert call.body == {**flow, "runId": "r9", "priority": 2}
    assert flow == {"steps": [{"id": "a", "command": "true"}]}
    with pytest.raises(BadDocument) as bad:
        methods.register(flow)  # a registered workflow needs a name
    assert bad.value.source == "the document" and bad.value.lines() == [
        "name: missing required field"
    ]
