"""A step's ``forEach`` and ``maxParallel`` checked as written (shared/core/conditions.py,
through the validator as a user meets it), and an instance's id as subjects and keys hold
it (shared/wire/names.py). No I/O."""

from __future__ import annotations

import pytest
from heddle.shared.core.step_env import passes
from heddle.shared.core.validation import Limits, workflow_problems
from heddle.shared.wire import names


def problems(*steps: dict) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in workflow_problems({"steps": list(steps)}, Limits())]


def test_a_loop_over_an_upstream_output_a_parameter_or_a_literal_is_accepted() -> None:
    assert not problems(
        {"id": "list", "command": "true"},
        {
            "id": "each",
            "command": "true",
            "dependsOn": ["list"],
            "forEach": "steps.list.outputs.files",
            "maxParallel": 8,
        },
        {"id": "regions", "command": "true", "forEach": "['eu', 'us']"},
        {"id": "p", "command": "true", "forEach": "params.regions"},
    )


@pytest.mark.parametrize(
    ("step", "path", "words"),
    [
        ({"forEach": 3}, "steps[0].forEach", "forEach must be a string"),
        ({"forEach": "1 +"}, "steps[0].forEach", "does not compile"),
        ({"forEach": "true"}, "steps[0].forEach", "gives bool, not a list"),
        ({"forEach": "steps.later.outputs.x"}, "steps[0].forEach", "not upstream"),
        ({"forEach": "[1]", "maxParallel": 0}, "steps[0].maxParallel", "at least 1"),
        ({"forEach": "[1]", "maxParallel": True}, "steps[0].maxParallel", "at least 1"),
        ({"forEach": "[1]", "maxParallel": "2"}, "steps[0].maxParallel", "at least 1"),
        ({"maxParallel": 2}, "steps[0].maxParallel", "needs a forEach"),
    ],
)
def test_a_bad_loop_is_refused_under_its_path(step: dict, path: str, words: str) -> None:
    found = problems({"id": "a", "command": "true", **step}, {"id": "later", "command": "true"})
    assert [p for p, _ in found] == [path]
    assert words in found[0][1]


def test_a_loop_and_a_condition_are_both_checked_for_what_they_read() -> None:
    found = problems(
        {"id": "a", "command": "true", "when": "steps.b.status == 'x'", "forEach": "steps.b.x"},
        {"id": "b", "command": "true"},
    )
    assert [p for p, _ in found] == ["steps[0].when", "steps[0].forEach"]


def test_an_instance_id_is_one_token_of_a_subject_and_a_key() -> None:
    step = names.instance_id("build", 12)
    assert step == "build[12]"
    assert names.step_key("r1", step) == "step.r1.build=12"
    assert names.step_ready("r1", step) == "heddle.step.ready.r1.build=12"
    assert names.log("r1", step, 2, "default", "w") == "heddle.log.r1.build=12.2.default.w"
    assert names.heartbeat_key("r1", step, "runner-0") == "r1.build=12.runner-0"
    assert names.step_key("r1", "build") == "step.r1.build"  # a plain id as it is
    assert names.is_step_id(step) and names.is_step_id("build")
    for bad in ("build[]", "build[01]", "build[1", "build.1", "[1]", "a[1][2]"):
        assert not names.is_step_id(bad), bad


def test_an_instance_learns_its_item_and_index() -> None:
    assert passes("HEDDLE_ITEM") and passes("HEDDLE_ITEM_INDEX")
