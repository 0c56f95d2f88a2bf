"""A step's condition as a workflow writes it: ``when`` (a CEL expression,
shared/core/expressions.py) and ``allowFailure``, checked with every other problem of the
document, and which steps a condition may read: only those upstream of it, whose outcomes
are known when it is decided. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from heddle.shared.core.dag import Graph, upstream
from heddle.shared.core.expressions import expression_problem
from heddle.shared.wire.errors import Problem

# ``steps.build`` or ``steps['deploy-1']`` / ``steps["deploy-1"]``: a step a condition reads.
STEP_REFERENCE = re.compile(
    r"""\bsteps\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*(?:'([^'\\]*)'|"([^"\\]*)")\s*\])"""
)


def condition_problems(step: Mapping[str, Any], path: str) -> list[Problem]:
    """What is wrong with a step's ``when`` and ``allowFailure`` as written."""
    problems: list[Problem] = []
    when = step.get("when")
    if when is not None:
        if not isinstance(when, str):
            problems.append(Problem(f"{path}.when", "when must be a string (a CEL expression)"))
        else:
            problem = expression_problem(when, "when")
            if problem is not None:
                problems.append(Problem(f"{path}.when", problem))
    if "allowFailure" in step and not isinstance(step["allowFailure"], bool):
        problems.append(Problem(f"{path}.allowFailure", "allowFailure must be true or false"))
    return problems


def referenced_steps(text: str) -> list[str]:
    """The step ids a condition names, in the order it names them, each once."""
    found: dict[str, None] = {}
    for match in STEP_REFERENCE.finditer(text):
        found[next(g for g in match.groups() if g is not None)] = None
    return list(found)


def reference_problems(
    steps: Sequence[object],
    deps: Sequence[tuple[str, Sequence[str]]],
    prefix: str = "steps",
    ended: Collection[str] = (),
) -> list[Problem]:
    """A condition that reads a step not upstream of its own: that step's outcome may not
    be known when the condition is decided, or never be (a step downstream of it). The
    ``ended`` steps may be read by any (the workflow's steps, for its exit handlers)."""
    problems: list[Problem] = []
    graph: Graph | None = None
    for i, step in enumerate(steps):
        when = step.get("when") if isinstance(step, dict) else None
        if not isinstance(when, str) or expression_problem(when) is not None:
            continue  # not a condition, or one reported already
        named = referenced_steps(when)
        if not named:
            continue
        graph = graph or Graph(deps)
        before = set(upstream(graph, deps[i][0])) | set(ended)
        for other in named:
            if other not in before:
                problems.append(
                    Problem(
                        f"{prefix}[{i}].when",
                        f"reads step {other!r}, which is not upstream of this step "
                        "(in its dependsOn, directly or not)",
                    )
                )
    return problems
