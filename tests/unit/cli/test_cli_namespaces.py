"""The command line's namespace (the client's config.py and calls.py, token_cli.py) without
I/O: where it is taken from, how it reaches the gateway's paths and bodies, and a token's
grants. Against a real
stack: tests/integration/test_namespaces_cli.py."""

from __future__ import annotations

import argparse

import pytest
from heddle.services.cli.main import parser
from heddle.services.cli.token_cli import create_body, roles_shown
from heddle.shared.api.config import resolve_namespace
from heddle.shared.api.errors import Usage
from heddle.shared.api.request import Connection, in_namespace, prepare


def test_the_flag_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HEDDLE_NAMESPACE", raising=False)
    assert resolve_namespace(None) is None
    monkeypatch.setenv("HEDDLE_NAMESPACE", "team-b")
    assert resolve_namespace(None) == "team-b" and resolve_namespace("team-a") == "team-a"
    for bad in ("a.b", "a b", "x" * 65, "a=b"):
        with pytest.raises(Usage, match="not a namespace's name"):
            resolve_namespace(bad)


def test_reads_and_commands_carry_the_namespace_in_their_query() -> None:
    assert in_namespace("GET", "/api/runs/r1", None, "team-a") == (
        "/api/runs/r1?namespace=team-a",
        None,
    )
    assert in_namespace("GET", "/api/runs?limit=5", None, "team-a")[0] == (
        "/api/runs?limit=5&namespace=team-a"
    )
    assert in_namespace("POST", "/api/workflows/etl/runs", {}, "t")[1] == {}
    assert in_namespace("GET", "/api/runs/r1", None, None) == ("/api/runs/r1", None)
    assert in_namespace("GET", "/healthz", None, "t") == ("/healthz", None)


def test_what_creates_a_run_or_a_workflow_names_it_in_its_body_unless_it_does() -> None:
    _, body = in_namespace("POST", "/api/runs", {"steps": []}, "team-a")
    assert body == {"namespace": "team-a", "steps": []}
    _, body = in_namespace("POST", "/api/workflows", {"namespace": "own", "steps": []}, "team-a")
    assert body["namespace"] == "own"
    request = prepare(Connection("http://gw", "tok", "team-a"), "POST", "/workflow", {"steps": []})
    assert request.url == "http://gw/workflow?namespace=team-a"
    assert request.data == b'{"namespace": "team-a", "steps": []}'


@pytest.mark.parametrize("where", ["before", "after"])
def test_namespace_option_goes_before_or_after_the_command(where: str) -> None:
    argv = ["-n", "team-a", "runs"] if where == "before" else ["runs", "--namespace", "team-a"]
    assert parser().parse_args(argv).namespace == "team-a"


def _create(*argv: str) -> argparse.Namespace:
    return parser().parse_args(["token", "create", "--name", "ci", *argv])


def test_a_token_is_made_with_a_role_or_with_grants() -> None:
    assert create_body(_create("--role", "viewer")) == {"name": "ci", "role": "viewer"}
    body = create_body(_create("--grant", "team-a=operator", "--grant", "team-b=viewer"))
    assert body == {"name": "ci", "namespaces": {"team-a": "operator", "team-b": "viewer"}}
    with pytest.raises(Usage, match="--grant"):
        create_body(_create())
    with pytest.raises(SystemExit):
        _create("--grant", "team-a=root")
    listed = {"name": "ci", "role": "operator", "namespaces": {"b": "viewer", "a": "operator"}}
    assert roles_shown(listed) == "a:operator,b:viewer"
    assert roles_shown({"name": "old", "role": "viewer"}) == "viewer"
