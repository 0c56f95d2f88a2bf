"""Workflows that call workflows (docs/sub-workflows.md): what a call step names is checked
against the registered workflows, a registration that would make a workflow call itself is
refused, and a child run is named, given its parameters and gathers its outputs here.
Pure: no I/O; the gateway and the orchestrator read the registry and pass what they found.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

from heddle.shared.core.namespaces import namespace_of, own_name, qualified
from heddle.shared.wire.contracts import ParamSpec, StepSpec, WorkflowCall
from heddle.shared.wire.errors import Problem


def calls_of(
    steps: Sequence[StepSpec], on_exit: Sequence[StepSpec] = ()
) -> list[tuple[str, WorkflowCall]]:
    """Each call step's call, with the path of its ``workflow`` field in the document."""
    found: list[tuple[str, WorkflowCall]] = []
    for prefix, group in (("steps", steps), ("onExit", on_exit)):
        for i, step in enumerate(group):
            if step.workflow is not None:
                found.append((f"{prefix}[{i}].workflow", step.workflow))
    return found


def called_names(steps: Sequence[StepSpec], on_exit: Sequence[StepSpec] = ()) -> set[str]:
    """The names of the workflows a document calls."""
    return {call.name for _, call in calls_of(steps, on_exit)}


def callee_problems(
    calls: Iterable[tuple[str, WorkflowCall]],
    latest: Mapping[str, int],
    declared: Mapping[tuple[str, int], Sequence[ParamSpec]],
    namespace: str,
) -> list[Problem]:
    """Every problem with what the calls name: a workflow registered in ``namespace``
    (``latest``: each registered one's newest version), a version of it that exists
    (``declared``: the parameters of each version read), parameters it declares, and
    each one it declares without a default given."""
    problems: list[Problem] = []
    for path, call in calls:
        newest = latest.get(call.name)
        if newest is None:
            problems.append(
                Problem(
                    f"{path}.name",
                    f"workflow {call.name!r} is not registered in namespace {namespace!r}",
                )
            )
            continue
        version = call.version or newest
        params = declared.get((call.name, version))
        if params is None:
            problems.append(
                Problem(f"{path}.version", f"workflow {call.name!r} has no version {version}")
            )
            continue
        names = {p.name for p in params}
        for given in sorted(set(call.params) - names):
            problems.append(
                Problem(
                    f"{path}.params.{given}",
                    f"workflow {call.name!r} version {version} declares no parameter {given!r}",
                )
            )
        for p in params:
            if p.default is None and p.name not in call.params:
                problems.append(
                    Problem(
                        f"{path}.params",
                        f"parameter {p.name!r} of workflow {call.name!r} has no default: give it",
                    )
                )
    return problems


def find_cycle(start: str, callees: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A chain of calls from ``start`` back to itself (``start`` first and last), over
    ``callees`` (each workflow's, by name); None if there is none. The shortest one, so
    that the error names the fewest workflows."""
    seen = {start}
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for name in frontier:
            for callee in sorted(callees.get(name, ())):
                if callee == start:
                    back = [name]
                    while back[-1] != start:
                        back.append(came_from[back[-1]])
                    return [*reversed(back), start]
                if callee not in seen:
                    seen.add(callee)
                    came_from[callee] = name
                    following.append(callee)
        frontier = following
    return None


def cycle_problem(cycle: Sequence[str]) -> Problem:
    if len(cycle) == 2:
        return Problem("steps", f"workflow {cycle[0]!r} would call itself")
    chain = " -> ".join(cycle)
    return Problem("steps", f"workflow {cycle[0]!r} would call itself: {chain}")


def child_run_id(parent_run: str, step_id: str, attempt: int) -> str:
    """The child run of a call step's attempt: the same however often it is asked for (so
    a submit sent again makes one child), in the parent's namespace, and a valid id
    (names.ID_PATTERN: at most 64 characters) whatever the parent's and the step's."""
    digest = hashlib.sha256(f"{parent_run}/{step_id}/{attempt}".encode()).hexdigest()[:8]
    own = f"{own_name(parent_run)[:24]}-{step_id[:16]}-{attempt}-{digest}"
    return qualified(namespace_of(parent_run), own)


def call_attempt(child_run: str) -> int:
    """The attempt of its call step a child run belongs to, as ``child_run_id`` wrote it."""
    try:
        return int(child_run.rsplit("-", 2)[-2])
    except (IndexError, ValueError):
        return 0


def missing_reason(call: WorkflowCall, declared: Sequence[ParamSpec], version: int) -> str | None:
    """Why a call cannot start the version it found, if it cannot: a parameter with no
    default, not given (made so since the call was checked)."""
    missing = [p.name for p in declared if p.default is None and p.name not in call.params]
    if not missing:
        return None
    listed = ", ".join(repr(m) for m in missing)
    return f"workflow {call.name!r} version {version} needs {listed}, which the call does not give"


def child_params(call: WorkflowCall, declared: Sequence[ParamSpec]) -> dict[str, str]:
    """A child run's parameters: the call's, and the defaults of those it does not give."""
    values = {p.name: p.default for p in declared if p.default is not None}
    return {**values, **call.params}


def gathered_outputs(steps: Iterable[tuple[str, Mapping[str, str]]]) -> dict[str, str]:
    """A child run's outputs, as its call step's: each succeeded step's, keyed
    ``<step>_<key>``, so that a step after the call step reads
    ``HEDDLE_OUT_<CALLSTEP>_<STEP>_<KEY>``."""
    return {f"{step}_{key}": value for step, outputs in steps for key, value in outputs.items()}


def depth_reason(depth: int, limit: int) -> str:
    return (
        f"a call at depth {depth} is deeper than HEDDLE_MAX_CALL_DEPTH ({limit}): "
        "calls nest too deep"
    )


def gone_reason(name: str, version: int | None) -> str:
    if version is None:
        return f"workflow {own_name(name)!r} is not registered any more"
    return f"workflow {own_name(name)!r} has no version {version} any more"
