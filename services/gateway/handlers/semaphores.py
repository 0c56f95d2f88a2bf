"""Semaphores (docs/pools.md, "Semaphores"): ``GET /api/semaphores`` and
``GET /api/semaphores/{name}`` show each one's size, the steps holding its slots and those
waiting for one; ``PUT /api/semaphores/{name}`` sets its size (admin). The size is written by
compare-and-set (shared/broker/semaphore_store.py), so no holder an orchestrator writes
meanwhile is lost. A semaphore never set nor taken has size 1."""

from __future__ import annotations

import logging

from aiohttp import web
from heddle.services.gateway.http import answers, inputs
from heddle.services.gateway.http.keys import CALLER, RESOURCES
from heddle.services.gateway.http.scope import listed_namespaces, namespace_scope, object_scope
from heddle.services.gateway.openapi.route import NAMESPACE, UNKNOWN_NAMESPACE, Param, Route
from heddle.shared.api.registry_answers import (
    SemaphoreDoc,
    SemaphoreList,
    SemaphoreSize,
    SemaphoreStep,
)
from heddle.shared.broker.semaphore_store import change, read, read_all, unknown
from heddle.shared.core.namespaces import in_namespaces, own_name, split_qualified
from heddle.shared.core.quotas import quota_namespace
from heddle.shared.core.semaphores import name_problem, resize, size_problem
from heddle.shared.runtime.service import event
from heddle.shared.wire.contracts import Semaphore, SemaphoreHolder
from heddle.shared.wire.errors import Problem

log = logging.getLogger("heddle.gateway")


def semaphore_document(stored: str, sem: Semaphore) -> SemaphoreDoc:
    """A semaphore as the API shows it: its names (its own, its steps' runs') within its
    namespace."""

    def shown(entries: list[SemaphoreHolder]) -> list[SemaphoreStep]:
        return [
            SemaphoreStep(
                run_id=own_name(e.run_id), step_id=e.step_id, attempt=e.attempt, since=e.since
            )
            for e in entries
        ]

    namespace, name = split_qualified(stored)
    return SemaphoreDoc(
        name=name,
        namespace=namespace,
        size=sem.size,
        holders=shown(sem.holders),
        waiting=shown(sem.waiting),
    )


def _name(request: web.Request) -> str:
    name = request.match_info["name"]
    problem = name_problem(name)
    if problem is not None:
        raise answers.bad_request("invalid semaphore name", [Problem("name", problem)])
    return name


async def list_semaphores(request: web.Request) -> web.Response:
    namespaces = await listed_namespaces(request)
    found = await read_all(request.app[RESOURCES].semaphores)
    docs = [
        semaphore_document(name, sem)
        for name, sem in sorted(found.items())
        # A namespace's quota is its own document, shown by GET /api/namespaces alone.
        if in_namespaces(name, namespaces) and quota_namespace(name) is None
    ]
    return answers.json_response(SemaphoreList(semaphores=docs))


async def get_semaphore(request: web.Request) -> web.Response:
    name = _name(request)
    scope = object_scope(request)
    # One never set nor taken, where the caller may not look: as a semaphore unknown.
    sem = unknown()
    if scope.seen:
        sem, _ = await read(request.app[RESOURCES].semaphores, scope.stored(name))
    return answers.json_response(semaphore_document(scope.stored(name), sem))


async def set_size(request: web.Request) -> web.Response:
    problems: list[Problem] = []
    name = request.match_info["name"]
    if (why := name_problem(name)) is not None:
        problems.append(Problem("name", why))
    body = await inputs.read_json(request)
    if not isinstance(body, dict):
        problems.append(Problem("", 'the body must be a JSON object: {"size": N}'))
    else:
        problems.extend(Problem(k, f"unknown field {k!r}") for k in body if k != "size")
        if "size" not in body:
            problems.append(Problem("size", "missing required field"))
        elif (why := size_problem(body["size"])) is not None:
            problems.append(Problem("size", why))
    if problems:
        return answers.error(400, "invalid semaphore size", problems)
    stored = (await namespace_scope(request)).stored(name)
    size: int = body["size"]
    sem = await change(request.app[RESOURCES].semaphores, stored, lambda s: resize(s, size))
    caller = request.get(CALLER)
    event(log, "semaphore size", name=stored, size=size, by=caller.name if caller else None)
    return answers.json_response(semaphore_document(stored, sem))


NAME = Param(
    "name",
    "path",
    {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
    "The semaphore's name",
)
ROUTES = (
    Route(
        "GET",
        "/api/semaphores",
        list_semaphores,
        operation_id="listSemaphores",
        summary="Every semaphore set or taken, with its holders",
        tag="semaphores",
        role="viewer",
        params=(NAMESPACE,),
        errors=UNKNOWN_NAMESPACE,
        answers={200: (SemaphoreList, "Every semaphore, by name")},
    ),
    Route(
        "GET",
        "/api/semaphores/{name}",
        get_semaphore,
        operation_id="getSemaphore",
        summary="A semaphore: its size, its holders and the steps waiting",
        tag="semaphores",
        role="viewer",
        answers={200: (SemaphoreDoc, "The semaphore (size 1 and no holder if unknown)")},
        params=(
            NAMESPACE,
            NAME,
        ),
    ),
    Route(
        "PUT",
        "/api/semaphores/{name}",
        set_size,
        operation_id="setSemaphoreSize",
        summary="Set a semaphore's size",
        tag="semaphores",
        role="admin",
        answers={200: (SemaphoreDoc, "The semaphore with its new size")},
        params=(
            NAMESPACE,
            NAME,
        ),
        errors=UNKNOWN_NAMESPACE,
        body=SemaphoreSize,
        example={"size": 3},
        description=(
            "A smaller size frees nothing early: the steps holding a slot keep it, and the "
            "next step waits until fewer than the size hold one."
        ),
    ),
)
