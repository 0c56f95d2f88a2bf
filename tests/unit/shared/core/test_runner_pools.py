"""HEDDLE_RUNNER_POOLS: parsed, checked (every problem named), and the pools a step could use."""

from __future__ import annotations

import json

import pytest
from heddle.shared.core.runner_pools import PoolSpec, parse_pools, pools_with_labels
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire.errors import SettingsError

TWO = [
    {
        "name": "default",
        "labels": ["default"],
        "statefulset": "runner-",
        "minReplicas": 2,
        "maxReplicas": 2,
        "autoscaling": False,
    },
    {
        "name": "gpu",
        "labels": ["cuda", "gpu"],
        "statefulset": "runner-gpu-",
        "minReplicas": 0,
        "maxReplicas": 4,
        "autoscaling": True,
    },
]


def test_empty_means_only_the_default_pool_unlisted() -> None:
    assert parse_pools("") == []
    assert parse_pools("  ") == []


def test_the_chart_s_pools_parse() -> None:
    default, gpu = parse_pools(json.dumps(TWO))
    assert default == PoolSpec("default", "runner-", ("default",), 2, 2, False)
    assert gpu == PoolSpec("gpu", "runner-gpu-", ("cuda", "gpu"), 0, 4, True)


def test_a_pool_s_name_is_always_one_of_its_labels_sorted_once() -> None:
    (pool,) = parse_pools(
        json.dumps([{"name": "big", "statefulset": "runner-big-", "labels": ["x", "a", "x"]}])
    )
    assert pool.labels == ("a", "big", "x")
    assert (pool.min_replicas, pool.max_replicas, pool.autoscaling) == (0, 0, False)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[", ["not JSON"]),
        ('{"name": "gpu"}', ["JSON list"]),
        ('[{"name": "gpu"}]', ["pool 0 (gpu)", "statefulset"]),
        ('[{"name": "gpu", "statefulset": "s-", "size": 3}]', ["pool 0 (gpu)", "size"]),
        ('[{"name": 3, "statefulset": "s-"}]', ["pool 0", "name", "str"]),
        ('[{"name": "GPU", "statefulset": "s-"}]', ["'GPU'", "lowercase"]),
        ('[{"name": "7up", "statefulset": "s-"}]', ["'7up'", "start with a letter"]),
        ('[{"name": "gpu", "statefulset": ""}]', ["statefulset must not be empty"]),
        ('[{"name": "gpu", "statefulset": "s-", "labels": ["a b"]}]', ["'a b'", "spaces"]),
        ('[{"name": "gpu", "statefulset": "s-", "labels": ["a,b"]}]', ["'a,b'", "commas"]),
        (
            '[{"name": "gpu", "statefulset": "s-", "minReplicas": 3, "maxReplicas": 2}]',
            ["minReplicas <= maxReplicas", "3 and 2"],
        ),
        (
            '[{"name": "gpu", "statefulset": "s-", "autoscaling": true}]',
            ["autoscaling pool needs maxReplicas of 1"],
        ),
        (
            '[{"name": "a", "statefulset": "s-"}, {"name": "a", "statefulset": "t-"}]',
            ["two pools with the name 'a'"],
        ),
        (
            '[{"name": "a", "statefulset": "s-"}, {"name": "b", "statefulset": "s-"}]',
            ["two pools with the statefulset 's-'"],
        ),
    ],
)
def test_each_problem_is_named(text: str, words: list[str]) -> None:
    with pytest.raises(ValueError, match="HEDDLE_RUNNER_POOLS") as info:
        parse_pools(text)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_every_problem_is_listed_at_once() -> None:
    text = json.dumps(
        [
            {"name": "Bad", "statefulset": "", "minReplicas": -1},
            {"name": "ok", "statefulset": "runner-ok-", "colour": "red"},
            {"name": "ok2", "statefulset": "runner-ok2-", "autoscaling": True},
        ]
    )
    with pytest.raises(ValueError) as info:
        parse_pools(text)
    message = str(info.value)
    for word in ("'Bad'", "statefulset must not be empty", "-1", "colour", "pool 2 (ok2)"):
        assert word in message, (word, message)


def test_settings_report_a_bad_pools_value() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"HEDDLE_RUNNER_POOLS": '[{"name": "gpu"}]'})
    (problem,) = info.value.problems
    assert problem.startswith("HEDDLE_RUNNER_POOLS") and "statefulset" in problem
    assert Settings.from_env({"HEDDLE_RUNNER_POOLS": json.dumps(TWO)}).runner_pools


def test_pools_with_every_label_asked() -> None:
    pools = parse_pools(
        json.dumps(
            [
                *TWO,
                {"name": "big", "labels": ["cuda"], "statefulset": "runner-big-"},
            ]
        )
    )
    names = lambda runs_on: [p.name for p in pools_with_labels(pools, runs_on)]  # noqa: E731
    assert names([]) == ["default"]  # no runsOn: the default pool alone
    assert names(["cuda"]) == ["gpu", "big"]
    assert names(["cuda", "gpu"]) == ["gpu"]
    assert names(["big"]) == ["big"]
    assert names(["default"]) == ["default"]
    assert names(["cuda", "arm"]) == []
    assert pools_with_labels([], []) == []
