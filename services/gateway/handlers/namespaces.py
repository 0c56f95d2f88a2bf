"""Namespaces and their quotas (docs/namespaces.md, "Quotas"): ``GET /api/namespaces`` and
``GET /api/namespaces/{ns}`` show the namespaces a token may see, each with its quotas and
what it has in use; ``PUT /api/namespaces/{ns}`` makes one or sets its quotas (the system's
admin alone). A namespace the token may not see answers as one that does not exist.

The running steps a quota counts are the holders of the namespace's implicit semaphore the
orchestrators keep (shared/core/quotas.py), and its runs under way the holders of its implicit
concurrency key, while it has the quota; without one, the runs the runs index shows running
and not waiting their turn."""

from __future__ import annotations

import logging
from collections import Counter

from aiohttp import web
from heddle.services.gateway.http import answers, inputs
from heddle.services.gateway.http.keys import CALLER, RESOURCES, RUN_INDEX
from heddle.services.gateway.http.scope import grants_of
from heddle.services.gateway.openapi.route import Param, Route
from heddle.shared.api.registry_answers import (
    NamespaceDoc,
    NamespaceList,
    NamespaceQuotas,
)
from heddle.shared.broker.concurrency_store import KEYS
from heddle.shared.broker.namespace_store import NAMESPACES
from heddle.shared.broker.semaphore_store import SEMAPHORES
from heddle.shared.core import quotas
from heddle.shared.core.namespace_access import role_there
from heddle.shared.core.namespaces import (
    DEFAULT_NAMESPACE,
    NAMESPACE_PATTERN,
    namespace_of,
    namespace_problems,
)
from heddle.shared.core.tokens import is_system_admin
from heddle.shared.runtime.service import event
from heddle.shared.wire.contracts import NamespaceRecord
from heddle.shared.wire.timefmt import now_rfc3339

log = logging.getLogger("heddle.gateway")


async def _runs_under_way(request: web.Request) -> Counter[str]:
    """Each namespace's runs under way (running, not waiting their turn), from the runs index."""
    runs = await request.app[RUN_INDEX].caught_up()
    return Counter(
        namespace_of(r.run_id) for r in runs.newest(runs.total, "running") if not r.waiting
    )


async def _document(
    request: web.Request, record: NamespaceRecord, under_way: Counter[str]
) -> NamespaceDoc:
    """A namespace as the API shows it: its quotas and what it has in use."""
    res = request.app[RESOURCES]
    name = record.name
    steps = None
    if record.max_running_steps is not None:
        sem, _ = await SEMAPHORES.read(res.semaphores, quotas.steps_semaphore(name))
        steps = len(sem.holders)
    runs = under_way[name]
    if record.max_runs_under_way is not None:  # the count the quota holds them to
        key, _ = await KEYS.read(res.concurrency, quotas.runs_key(name))
        runs = len(key.holders)
    return NamespaceDoc(
        name=name,
        max_runs_under_way=record.max_runs_under_way,
        max_running_steps=record.max_running_steps,
        runs_under_way=runs,
        running_steps=steps,
        created_at=record.created_at or None,
    )


async def _records(request: web.Request) -> dict[str, NamespaceRecord]:
    """Every namespace the caller may see, by name: ``default`` with or without a record."""
    stored = await NAMESPACES.read_all(request.app[RESOURCES].namespaces)
    found = {name: rec for name, rec in stored.items() if rec.name == name}
    found.setdefault(DEFAULT_NAMESPACE, NamespaceRecord(name=DEFAULT_NAMESPACE))
    granted = grants_of(request)
    return {n: r for n, r in sorted(found.items()) if role_there(granted, n) is not None}


async def list_namespaces(request: web.Request) -> web.Response:
    records = await _records(request)
    under_way = await _runs_under_way(request)
    docs = [await _document(request, rec, under_way) for rec in records.values()]
    return answers.json_response(NamespaceList(namespaces=docs))


async def get_namespace(request: web.Request) -> web.Response:
    name = request.match_info["ns"]
    record = (await _records(request)).get(name)
    if record is None:
        return answers.error(404, f"namespace {name!r} not found")
    return answers.json_response(await _document(request, record, await _runs_under_way(request)))


async def set_quotas(request: web.Request) -> web.Response:
    caller = request.get(CALLER)
    if caller is not None and not is_system_admin(caller):
        return answers.error(403, "only the system's admin makes namespaces and sets quotas")
    name = request.match_info["ns"]
    body = await inputs.read_json(request)
    problems = [*namespace_problems(name, "ns"), *quotas.body_problems(body)]
    if problems:
        return answers.error(400, "invalid namespace quotas", problems)
    now = now_rfc3339()
    record = await NAMESPACES.change(
        request.app[RESOURCES].namespaces,
        name,
        lambda rec: quotas.updated(rec if rec.name == name else None, name, body, now),
    )
    event(
        log,
        "namespace quotas",
        namespace=name,
        max_runs_under_way=record.max_runs_under_way,
        max_running_steps=record.max_running_steps,
        by=caller.name if caller else None,
    )
    return answers.json_response(await _document(request, record, await _runs_under_way(request)))


NS = Param(
    "ns",
    "path",
    {"type": "string", "pattern": NAMESPACE_PATTERN.pattern.removesuffix("\\Z") + "$"},
    "The namespace's name",
)
ROUTES = (
    Route(
        "GET",
        "/api/namespaces",
        list_namespaces,
        operation_id="listNamespaces",
        summary="The namespaces the token may see, with their quotas and what is in use",
        tag="namespaces",
        role="viewer",
        answers={200: (NamespaceList, "Every namespace the token may see, by name")},
    ),
    Route(
        "GET",
        "/api/namespaces/{ns}",
        get_namespace,
        operation_id="getNamespace",
        summary="A namespace: its quotas and what it has in use",
        tag="namespaces",
        role="viewer",
        answers={200: (NamespaceDoc, "The namespace")},
        errors={404: "No such namespace, or not one the token may see"},
        params=(NS,),
    ),
    Route(
        "PUT",
        "/api/namespaces/{ns}",
        set_quotas,
        operation_id="setNamespaceQuotas",
        summary="Make a namespace, or set its quotas (the system's admin)",
        tag="namespaces",
        role="admin",
        answers={200: (NamespaceDoc, "The namespace with its quotas")},
        errors={403: "The token is not the system's admin"},
        params=(NS,),
        body=NamespaceQuotas,
        example={"maxRunsUnderWay": 10, "maxRunningSteps": 20},
        description=(
            "Each quota is an integer of at least 1, or null (or left out) for no limit; "
            "the body replaces both. A lower quota stops nothing under way: the namespace "
            "starts no more until it is under the quota."
        ),
    ),
)
