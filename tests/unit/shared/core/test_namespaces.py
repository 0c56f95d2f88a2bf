"""Namespaces without I/O (shared/core/namespaces.py): names qualified and split, a stored
name checked, and a token's grants in each namespace (shared/core/tokens.py)."""

from __future__ import annotations

import msgspec
import pytest
from heddle.shared.core.namespaces import (
    DEFAULT_NAMESPACE,
    in_namespaces,
    namespace_of,
    namespace_problems,
    own_name,
    qualified,
    split_qualified,
    stored_name_problems,
)
from heddle.shared.core.tokens import (
    TokenRecord,
    grants,
    highest_role,
    is_system_admin,
    role_in,
    token_record_decoder,
)


@pytest.mark.parametrize(
    ("namespace", "name", "stored"),
    [("default", "etl", "etl"), ("team-a", "etl", "team-a=etl"), ("b_2", "n-1", "b_2=n-1")],
)
def test_a_name_is_qualified_outside_default_and_splits_back(
    namespace: str, name: str, stored: str
) -> None:
    assert qualified(namespace, name) == stored
    assert split_qualified(stored) == (namespace, name)
    assert (namespace_of(stored), own_name(stored)) == (namespace, name)


def test_two_namespaces_name_the_same_object_apart() -> None:
    assert qualified("team-a", "nightly-1") != qualified("team-b", "nightly-1")
    assert qualified(DEFAULT_NAMESPACE, "nightly-1") != qualified("team-a", "nightly-1")


def test_membership_of_stored_names() -> None:
    assert in_namespaces("team-a=x", ["team-a"]) and not in_namespaces("team-a=x", ["default"])
    assert in_namespaces("x", ["default"]) and in_namespaces("team-a=x", None)


@pytest.mark.parametrize("bad", ["", "a.b", "a=b", "a b", "x" * 65, "ä"])
def test_a_namespace_is_spelled_as_a_step_id(bad: str) -> None:
    (problem,) = namespace_problems(bad)
    assert problem.path == "namespace" and repr(bad) in problem.message
    assert namespace_problems(7)[0].message == "namespace must be a string, not int"
    assert namespace_problems("team-a") == []


@pytest.mark.parametrize("bad", ["a=b=c", "=b", "a=", "a.b", "a=b.c", ""])
def test_a_stored_name_is_a_name_or_a_namespace_and_a_name(bad: str) -> None:
    assert stored_name_problems(bad, "runId", "run id")[0].path == "runId"
    assert stored_name_problems("team-a=run-1", "runId", "run id") == []
    assert stored_name_problems("run-1", "runId", "run id") == []
    assert "string" in stored_name_problems(None, "runId", "run id")[0].message


def _token(role: str, namespaces: dict[str, str] | None = None) -> TokenRecord:
    doc = {"name": "t", "role": role, "hash": "h", "createdAt": "now"}
    if namespaces is not None:
        doc["namespaces"] = namespaces
    return token_record_decoder.decode(msgspec.json.encode(doc))


def test_an_admin_without_namespaces_is_the_systems_admin() -> None:
    admin = _token("admin")
    assert is_system_admin(admin) and grants(admin) is None
    assert role_in(admin, "team-a") == "admin" and highest_role(admin) == "admin"


def test_a_token_from_before_namespaces_holds_its_role_in_default_alone() -> None:
    for role in ("viewer", "operator"):
        old = _token(role)
        assert not is_system_admin(old) and grants(old) == {"default": role}
        assert role_in(old, "default") == role and role_in(old, "team-a") is None


def test_a_namespaced_token_has_its_role_in_each_of_its_namespaces() -> None:
    token = _token("viewer", {"team-a": "operator", "team-b": "viewer"})
    assert grants(token) == {"team-a": "operator", "team-b": "viewer"}
    assert [role_in(token, ns) for ns in ("team-a", "team-b", "default")] == [
        "operator",
        "viewer",
        None,
    ]
    assert highest_role(token) == "operator"
    namespace_admin = _token("admin", {"team-a": "admin"})
    assert not is_system_admin(namespace_admin) and role_in(namespace_admin, "team-b") is None


def test_derived_run_ids_stay_in_their_namespace() -> None:
    from datetime import UTC, datetime

    from heddle.shared.core.cron_plan import keyed_run_id, scheduled_run_id
    from heddle.shared.core.retries import retry_run_id

    long_ns = "n" * 64
    slot = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
    for ns in ("team-a", long_ns):
        for derived, plain in (
            (retry_run_id(f"{ns}=nightly-1"), retry_run_id("nightly-1")),
            (retry_run_id(f"{ns}={'r' * 64}"), retry_run_id("r" * 64)),
            (scheduled_run_id(f"{ns}=etl", slot), scheduled_run_id("etl", slot)),
            (scheduled_run_id(f"{ns}={'w' * 64}", slot), scheduled_run_id("w" * 64, slot)),
            (keyed_run_id(f"{ns}=etl", "k"), keyed_run_id("etl", "k")),
        ):
            assert split_qualified(derived) == (ns, plain)
            assert len(plain) <= 64
