"""The one decision of what a token may do in a namespace and which namespace a request
means (shared/core/namespace_access.py), over every kind of token."""

from __future__ import annotations

import itertools

import pytest
from heddle.shared.core.namespace_access import (
    Grants,
    access,
    administered,
    caller_grants,
    listed,
    manages,
    request_namespace,
    role_there,
    ungrantable,
    visible,
)
from heddle.shared.core.tokens import ROLES, Role, TokenRecord, allows


def token(role: Role, namespaces: dict[str, Role] | None = None) -> TokenRecord:
    return TokenRecord(name="t", role=role, hash="h", created_at="", namespaces=namespaces or {})


SYSTEM_ADMIN = token("admin")
OLD_OPERATOR = token("operator")  # made before namespaces: operator in default alone
TEAM_A = token("operator", {"team-a": "operator"})
TWO_TEAMS = token("admin", {"team-a": "admin", "team-b": "viewer"})
NAMESPACES = ("default", "team-a", "team-b", "team-c")


def test_the_grants_of_each_kind_of_caller() -> None:
    assert caller_grants(None) is None  # authentication off: everything
    assert caller_grants(SYSTEM_ADMIN) is None
    assert caller_grants(OLD_OPERATOR) == {"default": "operator"}
    assert caller_grants(token("viewer")) == {"default": "viewer"}
    assert caller_grants(TEAM_A) == {"team-a": "operator"}
    assert caller_grants(TWO_TEAMS) == {"team-a": "admin", "team-b": "viewer"}


@pytest.mark.parametrize(
    ("asked", "granted", "meant"),
    [
        ("team-b", {"team-a": "operator"}, "team-b"),  # asked for: that one, seen or not
        ("default", None, "default"),
        (None, None, "default"),  # everything: no namespace of its own
        (None, {"team-a": "operator"}, "team-a"),  # exactly one grant: its own
        (None, {"default": "viewer"}, "default"),
        (None, {"team-a": "admin", "team-b": "viewer"}, "default"),  # several: default
        (None, {}, "default"),
    ],
)
def test_the_namespace_a_request_means(asked: str | None, granted: Grants, meant: str) -> None:
    assert request_namespace(asked, granted) == meant


def test_every_role_against_every_need_in_every_namespace() -> None:
    callers: list[Grants] = [None, {"team-a": "operator"}, {"team-a": "admin", "team-b": "viewer"}]
    for granted, ns, needs, exists in itertools.product(callers, NAMESPACES, ROLES, (True, False)):
        role = role_there(granted, ns)
        verdict = access(granted, ns, needs, exists)
        if role is None or not exists:
            assert verdict == "unseen", (granted, ns, needs, exists)
        elif allows(role, needs):
            assert verdict == "allowed", (granted, ns, needs)
        else:
            assert verdict == "too-low", (granted, ns, needs)


def test_access_cases_by_name() -> None:
    a_op: Grants = {"team-a": "operator"}
    assert access(a_op, "team-a", "operator") == "allowed"
    assert access(a_op, "team-a", "viewer") == "allowed"
    assert access(a_op, "team-a", "admin") == "too-low"
    assert access(a_op, "team-b", "viewer") == "unseen"  # as a namespace that does not exist
    assert access(a_op, "default", "viewer") == "unseen"
    assert access(a_op, "team-a", "viewer", exists=False) == "unseen"
    assert access(None, "team-z", "admin") == "allowed"
    assert access(None, "team-z", "viewer", exists=False) == "unseen"
    assert access({"default": "viewer"}, "default", "operator") == "too-low"


def test_what_lists_show() -> None:
    assert visible(None) is None
    assert visible({"team-a": "viewer", "team-b": "admin"}) == {"team-a", "team-b"}
    assert visible({}) == frozenset()
    assert listed(None, None) is None
    assert listed(None, "team-a") == {"team-a"}
    assert listed({"team-a": "viewer"}, None) == {"team-a"}
    assert listed({"team-a": "viewer"}, "team-b") == {"team-b"}  # refused by access first


def test_which_tokens_a_caller_may_make() -> None:
    assert administered(None) is None
    assert administered({"team-a": "admin", "team-b": "viewer"}) == {"team-a"}
    assert administered({"default": "operator"}) == frozenset()
    # The system's admin grants anything, the system's admin included.
    assert ungrantable(None, None) == []
    assert ungrantable(None, {"team-a": "admin", "team-z": "viewer"}) == []
    two: Grants = {"team-a": "admin", "team-b": "viewer"}
    assert ungrantable(two, {"team-a": "operator"}) == []
    assert ungrantable(two, {"team-a": "admin"}) == []
    assert ungrantable(two, {"team-b": "viewer", "team-a": "viewer"}) == ["team-b"]
    assert ungrantable(two, {"team-c": "viewer", "team-b": "viewer"}) == ["team-b", "team-c"]
    assert ungrantable(two, {"default": "viewer"}) == ["default"]  # an old-style token
    assert ungrantable(two, None) == ["*"]  # a system's admin
    assert ungrantable({"default": "admin"}, {"default": "operator"}) == []


def test_which_tokens_a_caller_manages() -> None:
    two: Grants = {"team-a": "admin", "team-b": "viewer"}
    assert manages(two, TEAM_A)
    assert manages(two, token("viewer", {"team-a": "viewer"}))
    assert not manages(two, TWO_TEAMS)  # it has a grant in team-b too
    assert not manages(two, OLD_OPERATOR)  # default's
    assert not manages(two, SYSTEM_ADMIN)
    for record in (SYSTEM_ADMIN, OLD_OPERATOR, TEAM_A, TWO_TEAMS):
        assert manages(None, record)
        assert not manages({"team-a": "operator"}, record)
