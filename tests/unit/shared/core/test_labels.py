"""Runner labels and which steps a runner takes (shared/core/labels.py)."""

from __future__ import annotations

import pytest
from heddle.shared.core.labels import (
    label_key,
    label_problems,
    parse_labels,
    runner_labels,
    served_keys,
    takes,
)


@pytest.mark.parametrize(
    ("pool", "labels", "runs_on", "taken"),
    [
        ("default", ["default"], [], True),
        ("gpu", ["gpu"], [], False),  # a named pool's runners are not spent on small steps
        ("gpu", ["a100", "gpu"], ["gpu"], True),
        ("gpu", ["a100", "gpu"], ["a100", "gpu"], True),
        ("gpu", ["gpu"], ["a100", "gpu"], False),  # every label, not one of them
        ("default", ["default", "linux"], ["linux"], True),
        ("default", ["default"], ["gpu"], False),
        ("default", ["default"], ["default"], True),  # runsOn: [default] is the default pool
        ("gpu", ["default", "gpu"], ["default"], False),
    ],
)
def test_a_runner_takes_a_step_with_every_label_it_asks_for(pool, labels, runs_on, taken):
    assert takes(pool, labels, runs_on) is taken


def test_a_label_key_names_a_set_in_one_order() -> None:
    assert label_key(["gpu", "a100", "gpu"]) == label_key(["a100", "gpu"]) == "a100+gpu"
    assert label_key([]) == "" and label_key(["default"]) == ""  # the default pool's lanes


def test_a_runner_serves_every_subset_of_its_labels() -> None:
    assert served_keys(["gpu", "a100"]) == ["a100", "gpu", "a100+gpu"]
    assert len(served_keys(["a", "b", "c", "d", "e", "f"])) == 63
    # A key a runner serves is exactly the key a step asking for that set publishes under.
    for key in served_keys(["x", "b", "m"]):
        assert label_key(key.split("+")) == key


def test_runner_labels_hold_the_pool_name_once_sorted() -> None:
    assert runner_labels("gpu", parse_labels(" a100, ,gpu,fast ")) == ["a100", "fast", "gpu"]


def test_every_label_problem_is_named() -> None:
    problems = label_problems(["ok", "a.b", "", "-x", "ok", "y" * 64], most=3)
    assert len(problems) == 6, problems
    assert any("'a.b'" in p for p in problems) and any("repeated: ok" in p for p in problems)
    assert any("at most 3" in p for p in problems)
    assert label_problems(["gpu", "a100", "zone_1-b"], most=3) == []
