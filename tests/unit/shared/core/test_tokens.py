"""API tokens without I/O (shared/core/tokens.py): the roles each allows, a token's shape and hash,
a token's text checked, a token request read. The token routes, a revocation seen by a second
gateway and `heddle token`: tests/integration/test_tokens.py."""

from __future__ import annotations

from heddle.shared.core.tokens import (
    allows,
    new_token,
    parse_token_request,
    token_hash,
    token_text_problem,
)


def test_roles_tokens_and_requests() -> None:
    assert [allows("operator", r) for r in ("viewer", "operator", "admin")] == [True, True, False]
    token = new_token()
    assert token.startswith("hdl_") and len(token) == 47 and new_token() != token
    assert len(token_hash(token)) == 64 and token_hash(token) == token_hash(token)
    assert token_text_problem(token) is None
    for text, words in (("", "empty"), ("a b" * 10, "spaces"), ("x" * 15, "shorter")):
        assert words in (token_text_problem(text) or ""), text
    assert parse_token_request({"name": "ci", "role": "viewer"}) == ("ci", "viewer", {})
    problems = parse_token_request({"role": "root", "extra": 1})
    assert isinstance(problems, list)
    assert [p.path for p in problems] == ["extra", "name", "role"]
    assert [p.path for p in parse_token_request([])] == [""]  # type: ignore[union-attr]


def test_a_token_request_with_namespaces() -> None:
    # The role is left out: it is stored as the highest of the grants.
    grants = {"team-a": "operator", "team-b": "viewer"}
    assert parse_token_request({"name": "ci", "namespaces": grants}) == ("ci", "operator", grants)
    asked = {"name": "ci", "role": "viewer", "namespaces": {"team-a": "admin"}}
    assert parse_token_request(asked) == ("ci", "admin", {"team-a": "admin"})
    # Every problem, each where it is: a bad name, a bad role, both in one grant.
    bad = {"name": "ci", "namespaces": {"a b": "viewer", "team-c": "root", "x=y": "boss"}}
    problems = parse_token_request(bad)
    assert isinstance(problems, list)
    assert sorted(p.path for p in problems) == [
        "namespaces.a b",
        "namespaces.team-c",
        "namespaces.x=y",
        "namespaces.x=y",
    ]
    problems = parse_token_request({"name": "ci", "namespaces": ["team-a"]})
    assert isinstance(problems, list) and [p.path for p in problems] == ["namespaces", "role"]
    problems = parse_token_request({"name": "ci", "role": "root", "namespaces": {"a": "admin"}})
    assert isinstance(problems, list) and [p.path for p in problems] == ["role"]
