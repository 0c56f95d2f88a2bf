"""A workflow's exit handlers (``onExit``) as a user wrote them, checked: steps like the
others, run once every other step has ended, so each depends only on other exit handlers and
none has the id of a step. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from heddle.shared.core.conditions import reference_problems
from heddle.shared.core.dag import structural_problems
from heddle.shared.core.step_checks import Limits, steps_deps
from heddle.shared.wire.errors import Problem


def exit_problems(
    exits: object, main: Sequence[tuple[str, Sequence[str]]], limits: Limits
) -> list[Problem]:
    """Every problem of the ``onExit`` list, given the workflow's steps (``main``: each id
    and its dependencies)."""
    if not isinstance(exits, list):
        return [Problem("onExit", "onExit must be a list of steps")]
    if len(main) + len(exits) > limits.max_steps:
        count = len(main) + len(exits)
        return [Problem("onExit", f"{count} steps with them; the limit is {limits.max_steps}")]
    problems: list[Problem] = []
    deps = steps_deps(exits, limits, problems, prefix="onExit")
    steps = {step_id for step_id, _ in main}
    for i, (step_id, parents) in enumerate(deps):
        if step_id in steps:
            problems.append(
                Problem(f"onExit[{i}].id", f"step id {step_id!r} is one of the workflow's steps")
            )
        for j, parent in enumerate(parents):
            if parent in steps:
                problems.append(
                    Problem(
                        f"onExit[{i}].dependsOn[{j}]",
                        f"{parent!r} is a step, not an exit handler: exit handlers run once "
                        "every step has ended, and depend only on each other",
                    )
                )
    own = [(s, [p for p in parents if p not in steps]) for s, parents in deps]
    problems.extend(structural_problems(own, prefix="onExit"))
    problems.extend(reference_problems(exits, own, prefix="onExit", ended=steps))
    return problems
