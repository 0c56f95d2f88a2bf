"""A step's condition and loop as a workflow writes them: ``when`` and ``forEach`` (CEL
expressions, shared/core/expressions.py), ``allowFailure`` and ``maxParallel``, checked with
every other problem of the document, and which steps an expression may read: only those
upstream of it, whose outcomes are known when it is evaluated. Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, get_args

from heddle.shared.core.dag import Graph
from heddle.shared.core.expressions import Use, expression_problem
from heddle.shared.wire.errors import Problem

# ``steps.build`` or ``steps['deploy-1']`` / ``steps["deploy-1"]``: a step a condition reads.
STEP_REFERENCE = re.compile(
    r"""\bsteps\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*(?:'([^'\\]*)'|"([^"\\]*)")\s*\])"""
)


EXPRESSION_FIELDS: tuple[Use, ...] = get_args(Use)  # when, forEach


def condition_problems(step: Mapping[str, Any], path: str) -> list[Problem]:
    """What is wrong with a step's ``when``, ``forEach``, ``allowFailure`` and
    ``maxParallel`` as written."""
    problems: list[Problem] = []
    for use in EXPRESSION_FIELDS:
        text = step.get(use)
        if text is None:
            continue
        if not isinstance(text, str):
            problems.append(Problem(f"{path}.{use}", f"{use} must be a string (a CEL expression)"))
        else:
            problem = expression_problem(text, use)
            if problem is not None:
                problems.append(Problem(f"{path}.{use}", problem))
    if "allowFailure" in step and not isinstance(step["allowFailure"], bool):
        problems.append(Problem(f"{path}.allowFailure", "allowFailure must be true or false"))
    if "maxParallel" in step:
        cap = step["maxParallel"]
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            problems.append(
                Problem(f"{path}.maxParallel", "maxParallel must be an integer of at least 1")
            )
        elif step.get("forEach") is None:
            problems.append(Problem(f"{path}.maxParallel", "maxParallel needs a forEach"))
    return problems


@functools.lru_cache(maxsize=4096)
def referenced_steps(text: str) -> tuple[str, ...]:
    """The step ids a condition names, in the order it names them, each once (found once
    per text and process, as the text is compiled once)."""
    found: dict[str, None] = {}
    for match in STEP_REFERENCE.finditer(text):
        found[next(g for g in match.groups() if g is not None)] = None
    return tuple(found)


def reference_problems(
    steps: Sequence[object],
    deps: Sequence[tuple[str, Sequence[str]]],
    prefix: str = "steps",
    ended: Collection[str] = (),
) -> list[Problem]:
    """A ``when`` or ``forEach`` that reads a step not upstream of its own: that step's
    outcome may not be known when the expression is evaluated, or never be (a step
    downstream of it). The ``ended`` steps may be read by any (the workflow's steps, for its
    exit handlers)."""
    problems: list[Problem] = []
    graph: Graph | None = None
    for i, step in enumerate(steps):
        for use in EXPRESSION_FIELDS:
            text = step.get(use) if isinstance(step, dict) else None
            if not isinstance(text, str) or expression_problem(text) is not None:
                continue  # no such expression, or one reported already
            named = referenced_steps(text)
            if not named:
                continue
            graph = graph or Graph(deps)
            wanted = set(named).difference(ended)
            missing = wanted - reached(graph, deps[i][0], wanted)
            for other in (s for s in named if s in missing):
                problems.append(
                    Problem(
                        f"{prefix}[{i}].{use}",
                        f"reads step {other!r}, which is not upstream of this step "
                        "(in its dependsOn, directly or not)",
                    )
                )
    return problems


def reached(graph: Graph, step: str, wanted: set[str]) -> set[str]:
    """Which of ``wanted`` are upstream of ``step``: a walk up its dependencies that stops
    once all are found, so a condition naming its own dependency costs one look, not a walk
    of everything before it (a long chain of conditions would cost its length squared)."""
    found: set[str] = set()
    seen: set[str] = set()
    todo = list(graph.parents.get(step, ()))
    while todo and found != wanted:
        node = todo.pop()
        if node in seen or node not in graph.index:
            continue
        seen.add(node)
        if node in wanted:
            found.add(node)
        todo.extend(graph.parents[node])
    return found
