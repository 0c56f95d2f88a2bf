"""Namespaces' quotas without I/O (shared/core/quotas.py): a PUT's body checked, the record
it makes, who sees a namespace, and the names of the documents that count a quota."""

from __future__ import annotations

import pytest
from heddle.shared.core import quotas
from heddle.shared.core.namespace_access import role_there
from heddle.shared.core.namespaces import split_qualified
from heddle.shared.core.semaphores import name_problem
from heddle.shared.wire.contracts import NamespaceRecord


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"maxRunsUnderWay": None, "maxRunningSteps": None},
        {"maxRunsUnderWay": 1},
        {"maxRunningSteps": 7},
        {"maxRunsUnderWay": 3, "maxRunningSteps": 1},
    ],
)
def test_a_body_of_integers_nulls_or_nothing_is_good(body: dict[str, object]) -> None:
    assert quotas.body_problems(body) == []


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ([1], [""]),
        ("x", [""]),
        ({"maxRunsUnderWay": 0}, ["maxRunsUnderWay"]),
        ({"maxRunningSteps": -1}, ["maxRunningSteps"]),
        ({"maxRunningSteps": True}, ["maxRunningSteps"]),
        ({"maxRunningSteps": 1.5}, ["maxRunningSteps"]),
        ({"maxRunningSteps": "2"}, ["maxRunningSteps"]),
        ({"other": 1}, ["other"]),
        (
            {"maxRunsUnderWay": 0, "maxRunningSteps": "x", "x": 1, "y": 2},
            ["x", "y", "maxRunsUnderWay", "maxRunningSteps"],
        ),
    ],
)
def test_every_problem_of_a_body_is_named(body: object, fields: list[str]) -> None:
    assert [p.path for p in quotas.body_problems(body)] == fields


def test_a_new_record_is_created_now_with_its_quotas() -> None:
    rec = quotas.updated(None, "team-a", {"maxRunningSteps": 2}, "2026-01-01T00:00:00Z")
    assert rec == NamespaceRecord(
        name="team-a",
        created_at="2026-01-01T00:00:00Z",
        max_runs_under_way=None,
        max_running_steps=2,
    )


def test_an_update_keeps_the_creation_and_replaces_both_quotas() -> None:
    stored = NamespaceRecord(
        name="team-a", created_at="then", max_runs_under_way=4, max_running_steps=2
    )
    rec = quotas.updated(stored, "team-a", {"maxRunsUnderWay": 1}, "now")
    assert (rec.created_at, rec.max_runs_under_way, rec.max_running_steps) == ("then", 1, None)


def test_a_stored_record_without_its_creation_is_given_one() -> None:
    rec = quotas.updated(NamespaceRecord(name="default"), "default", {}, "now")
    assert rec.created_at == "now"


@pytest.mark.parametrize(
    ("granted", "namespace", "seen"),
    [
        (None, "anything", True),
        ({"default": "viewer"}, "default", True),
        ({"default": "viewer"}, "team-a", False),
        ({"team-a": "admin"}, "team-a", True),
        ({"team-a": "admin"}, "default", False),
    ],
)
def test_a_namespace_is_seen_by_its_grants_alone(
    granted: dict[str, str] | None, namespace: str, seen: bool
) -> None:
    assert (role_there(granted, namespace) is not None) is seen


@pytest.mark.parametrize("namespace", ["default", "team-a", "b_2"])
def test_the_quota_documents_belong_to_their_namespace(namespace: str) -> None:
    for name in (quotas.steps_semaphore(namespace), quotas.runs_key(namespace)):
        assert split_qualified(name)[0] == namespace
        assert quotas.quota_namespace(name) == namespace
        assert name_problem(name) is not None  # no semaphore a user names


@pytest.mark.parametrize(
    "name", ["build", "team-a=build", "==running-steps", "team-a=running-steps", "a" * 64]
)
def test_other_names_are_no_quota_documents(name: str) -> None:
    assert quotas.quota_namespace(name) is None


def test_no_quota_is_no_bound() -> None:
    assert quotas.size(None) == quotas.UNLIMITED
    assert quotas.size(3) == 3
