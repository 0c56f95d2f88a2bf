"""Namespaces' quotas (docs/namespaces.md, "Quotas"): a namespace's record as a request sets
it, who may see it, and the shared documents that count what it has in use. Pure: no I/O.

A namespace's running steps are the holders of an implicit semaphore every step of the
namespace takes while it has a ``maxRunningSteps`` (shared/core/semaphores.py); its runs under
way, the holders of an implicit concurrency key every run of it takes while it has a
``maxRunsUnderWay`` (shared/core/concurrency.py). Both names hold ``==``, which no
semaphore's or key document's name a user makes can hold, so none is taken for another.
"""

from __future__ import annotations

from collections.abc import Mapping

from heddle.shared.wire.contracts import NamespaceRecord
from heddle.shared.wire.errors import Problem

FIELDS = ("maxRunsUnderWay", "maxRunningSteps")
# The size a quota's document is given when its namespace has none any more: every step or
# run waiting in it goes ahead, and those that never took it take nothing from now on.
UNLIMITED = 2**31 - 1
STEPS_SUFFIX = "==running-steps"
RUNS_SUFFIX = "==runs-under-way"


def steps_semaphore(namespace: str) -> str:
    """The implicit semaphore the steps of ``namespace`` take under a running-steps quota."""
    return f"{namespace}{STEPS_SUFFIX}"


def runs_key(namespace: str) -> str:
    """The implicit concurrency key (text and document name) of ``namespace``'s runs under a
    runs-under-way quota."""
    return f"{namespace}{RUNS_SUFFIX}"


def quota_namespace(name: str) -> str | None:
    """The namespace whose quota document ``name`` is, if it is one."""
    for suffix in (STEPS_SUFFIX, RUNS_SUFFIX):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def with_quota(names: list[str], quota: str | None) -> list[str]:
    """A step's semaphores as it asks for them now: its own, and its namespace's quota's
    while the namespace has one (``quota``); the same list when nothing changes."""
    if quota is None and not any(quota_namespace(n) for n in names):
        return names
    own = [n for n in names if quota_namespace(n) is None]
    return own if quota is None else [*own, quota]


def size(quota: int | None) -> int:
    """A quota document's size: the quota, or no bound at all."""
    return UNLIMITED if quota is None else quota


def body_problems(body: object) -> list[Problem]:
    """Every problem of a ``PUT /api/namespaces/{ns}`` body: an object of the two quotas,
    each null (or left out: no limit) or an integer of at least 1."""
    if not isinstance(body, dict):
        return [Problem("", 'the body must be a JSON object: {"maxRunsUnderWay": N, ...}')]
    problems = [Problem(k, f"unknown field {k!r}") for k in body if k not in FIELDS]
    for field in FIELDS:
        value = body.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            problems.append(Problem(field, f"{field} must be an integer or null, not {value!r}"))
        elif value is not None and value < 1:
            problems.append(Problem(field, f"{field} must be at least 1, not {value}"))
    return problems


def updated(
    stored: NamespaceRecord | None, name: str, body: Mapping[str, object], now: str
) -> NamespaceRecord:
    """The record ``body`` (checked by ``body_problems``) makes: its quotas replaced, a
    field left out meaning no limit; created now if it was not stored, else when it was."""
    runs = body.get("maxRunsUnderWay")
    steps = body.get("maxRunningSteps")
    return NamespaceRecord(
        name=name,
        created_at=stored.created_at if stored is not None and stored.created_at else now,
        max_runs_under_way=runs if isinstance(runs, int) else None,
        max_running_steps=steps if isinstance(steps, int) else None,
    )
