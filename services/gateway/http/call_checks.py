"""The checks of a document's call steps against the registry (docs/sub-workflows.md): what
each one calls is registered in the document's namespace, with the version and parameters
it gives, and a workflow registered does not come to call itself. The registry is read
here; what is wrong with it is decided by shared/core/calls.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from heddle.shared.broker import registry
from heddle.shared.core.calls import (
    called_names,
    callee_problems,
    calls_of,
    cycle_problem,
    find_cycle,
)
from heddle.shared.core.namespaces import qualified
from heddle.shared.wire.contracts import ParamSpec, StepSpec
from heddle.shared.wire.errors import Problem

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import KeyValue

# The most workflows a registration's cycle check reads: beyond, the calls are not followed.
MAX_FOLLOWED = 1000


async def call_problems(
    kv: KeyValue,
    namespace: str,
    steps: Sequence[StepSpec],
    on_exit: Sequence[StepSpec] = (),
    registering: str | None = None,
) -> list[Problem]:
    """Every problem with the document's calls; ``registering``: the name the document is
    registered under, which none of the workflows it calls may call back."""
    calls = calls_of(steps, on_exit)
    if not calls:
        return []
    latest: dict[str, int] = {}
    declared: dict[tuple[str, int], Sequence[ParamSpec]] = {}
    for _, call in calls:
        if call.name not in latest:
            found = await registry.get_latest(kv, qualified(namespace, call.name))
            if found is None:
                continue
            latest[call.name] = found[0].version
        version = call.version or latest[call.name]
        if (call.name, version) not in declared:
            stored = await registry.get_version(kv, qualified(namespace, call.name), version)
            if stored is not None:
                declared[(call.name, version)] = stored.spec.params
    # A first registration calling itself: the cycle below names it, not "not registered".
    checked = [(p, c) for p, c in calls if c.name != registering or c.name in latest]
    problems = callee_problems(checked, latest, declared, namespace)
    if registering is not None:
        cycle = await _cycle(kv, namespace, registering, called_names(steps, on_exit))
        if cycle is not None:
            problems.append(cycle_problem(cycle))
    return problems


async def _cycle(
    kv: KeyValue, namespace: str, registering: str, calls: set[str]
) -> list[str] | None:
    """A chain of calls from ``registering`` back to itself over the newest versions of the
    registered workflows, the new document in place of its name's."""
    callees: dict[str, set[str]] = {registering: calls}
    todo = sorted(calls)
    while todo and len(callees) < MAX_FOLLOWED:
        name = todo.pop()
        if name in callees:
            continue
        callees[name] = set()
        found = await registry.get_latest(kv, qualified(namespace, name))
        if found is None:
            continue
        stored = await registry.get_version(kv, qualified(namespace, name), found[0].version)
        if stored is not None:
            callees[name] = called_names(stored.spec.steps, stored.spec.on_exit)
            todo.extend(sorted(callees[name] - callees.keys()))
    return find_cycle(registering, callees)
