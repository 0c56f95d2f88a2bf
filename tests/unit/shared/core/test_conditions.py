"""shared/core/conditions.py: a step's ``when`` and ``allowFailure`` checked as written, and
the steps a condition may read (those upstream of it), through the validator as a user
meets it (shared/core/validation.py). No I/O."""

from __future__ import annotations

import pytest
from heddle.shared.core.conditions import referenced_steps
from heddle.shared.core.validation import Limits, workflow_problems


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("steps.build.status == 'failed'", ["build"]),
        ("steps['deploy-eu'].status == 'ok' && steps[\"x\"].outputs.k == '1'", ["deploy-eu", "x"]),
        ("steps . a . status == steps.a.status", ["a"]),
        ("params.steps == 'x' || mysteps.a == 'b'", []),
        ("has(steps.check.outputs.ready)", ["check"]),
    ],
)
def test_the_steps_a_condition_names(text: str, named: list[str]) -> None:
    assert referenced_steps(text) == tuple(named)


def problems(*steps: dict) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in workflow_problems({"steps": list(steps)}, Limits())]


def test_a_condition_may_read_any_step_upstream_of_it() -> None:
    assert not problems(
        {"id": "a", "command": "true"},
        {"id": "b", "command": "true", "dependsOn": ["a"]},
        {"id": "c", "command": "true", "dependsOn": ["b"], "when": "steps.a.status == 'failed'"},
        {"id": "d", "command": "true", "when": "params.env == 'prod'", "allowFailure": True},
    )


@pytest.mark.parametrize(
    ("when", "words"),
    [
        ("steps.b.status == 'failed'", "reads step 'b', which is not upstream"),  # beside
        ("steps.c.status == 'failed'", "reads step 'c', which is not upstream"),  # after
        ("steps.ghost.status == 'x'", "reads step 'ghost', which is not upstream"),
        ("steps.self.status == 'x'", "reads step 'self', which is not upstream"),
    ],
)
def test_a_condition_that_reads_a_step_not_upstream_is_refused(when: str, words: str) -> None:
    found = problems(
        {"id": "a", "command": "true"},
        {"id": "b", "command": "true", "dependsOn": ["a"]},
        {"id": "self", "command": "true", "dependsOn": ["a"], "when": when},
        {"id": "c", "command": "true", "dependsOn": ["self"]},
    )
    assert [p for p, _ in found] == ["steps[2].when"]
    assert words in found[0][1]


@pytest.mark.parametrize(
    ("fields", "path", "words"),
    [
        ({"when": "steps.a.status =="}, "steps[1].when", "does not compile"),
        ({"when": ""}, "steps[1].when", "empty"),
        ({"when": "params.env"}, "steps[1].when", "not a bool"),
        ({"when": "nosuch.thing == 'x'"}, "steps[1].when", "does not compile"),
        ({"when": 3}, "steps[1].when", "must be a string"),
        ({"allowFailure": "yes"}, "steps[1].allowFailure", "true or false"),
        ({"allowFailure": 1}, "steps[1].allowFailure", "true or false"),
        ({"allowFailure": None}, "steps[1].allowFailure", "true or false"),
    ],
)
def test_a_bad_condition_is_a_problem_at_its_path(fields: dict, path: str, words: str) -> None:
    found = problems(
        {"id": "a", "command": "true"}, {"id": "b", "command": "true", "dependsOn": ["a"], **fields}
    )
    assert [p for p, _ in found] == [path], found
    assert words in found[0][1]


def test_every_bad_condition_is_reported_together() -> None:
    found = problems(
        {"id": "a", "command": "true", "when": "1 +"},
        {"id": "b", "command": "true", "when": "steps.a.status == 'x'"},
        {"id": "c", "command": "true", "dependsOn": ["nope"], "allowFailure": "no"},
    )
    assert sorted(p for p, _ in found) == [
        "steps[0].when",
        "steps[1].when",
        "steps[2].allowFailure",
        "steps[2].dependsOn[0]",
    ]
