"""shared/core/exit_handlers.py: a workflow's ``onExit`` checked with the rest of the
document, each problem under its path. No I/O."""

from __future__ import annotations

import pytest
from heddle.shared.core.validation import Limits, parse_workflow, workflow_problems

LIMITS = Limits()
STEPS = [{"id": "build", "command": "make"}, {"id": "test", "command": "make test"}]


def problems(on_exit: object, limits: Limits = LIMITS) -> list[tuple[str, str]]:
    doc = {"steps": STEPS, "onExit": on_exit}
    return [(p.path, p.message) for p in workflow_problems(doc, limits)]


def test_exit_handlers_that_depend_on_each_other_and_read_any_step_are_fine() -> None:
    on_exit = [
        {"id": "notify", "command": "true", "when": "steps.build.status == 'failed'"},
        {"id": "tidy", "command": "true", "dependsOn": ["notify"], "allowFailure": True},
    ]
    assert problems(on_exit) == []
    spec = parse_workflow({"name": "w", "steps": STEPS, "onExit": on_exit}, Limits())
    assert [s.id for s in spec.on_exit] == ["notify", "tidy"]
    assert spec.on_exit[1].depends_on == ["notify"] and spec.on_exit[1].allow_failure


@pytest.mark.parametrize(
    ("on_exit", "path", "words"),
    [
        ({"id": "x"}, "onExit", "must be a list"),
        ([{"id": "build", "command": "true"}], "onExit[0].id", "one of the workflow's steps"),
        (
            [{"id": "n", "command": "true", "dependsOn": ["build"]}],
            "onExit[0].dependsOn[0]",
            "depend only on each other",
        ),
        (
            [{"id": "n", "command": "true", "dependsOn": ["ghost"]}],
            "onExit[0].dependsOn[0]",
            "unknown step",
        ),
        ([{"id": "n", "command": ""}], "onExit[0].command", "empty"),
        ([{"id": "n", "command": "true", "retries": -1}], "onExit[0].retries", "retries"),
        (
            [
                {"id": "n", "command": "true", "when": "steps.m.status == 'x'"},
                {"id": "m", "command": "true"},
            ],
            "onExit[0].when",
            "not upstream",
        ),
        (
            [{"id": "n", "command": "true", "dependsOn": ["n"]}],
            "onExit[0].dependsOn[0]",
            "depends on itself",
        ),
        (
            [{"id": "n", "command": "true"}, {"id": "n", "command": "true"}],
            "onExit[1].id",
            "duplicate",
        ),
    ],
)
def test_a_bad_exit_handler_is_a_problem_at_its_path(
    on_exit: object, path: str, words: str
) -> None:
    found = problems(on_exit)
    assert [p for p, _ in found] == [path], found
    assert words in found[0][1]


def test_exit_handlers_count_toward_the_step_limit() -> None:
    found = problems([{"id": "n", "command": "true"}], Limits(max_steps=2))
    assert found == [("onExit", "3 steps with them; the limit is 2")]
