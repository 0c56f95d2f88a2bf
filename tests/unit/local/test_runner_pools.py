"""`heddle up --pool NAME=COUNT[:labels][@namespaces]` (services/local/runner_pools.py)."""

from __future__ import annotations

import pytest
from heddle.services.local.runner_pools import (
    PoolOptionError,
    PoolRequest,
    parse_pool,
    parse_pools,
    runner_specs,
)


def test_a_pool_option_gives_its_count_and_labels() -> None:
    assert parse_pool("gpu=2") == PoolRequest("gpu", 2)
    assert parse_pool("gpu=3:a100,fast") == PoolRequest("gpu", 3, ("a100", "fast"))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpu", "expected NAME=COUNT"),
        ("gpu=0", "at least 1"),
        ("gpu=x", "at least 1"),
        ("g.pu=1", "pool name"),
        ("gpu=1:a.b", "'a.b'"),
        ("default=2", "--runners N"),
        ("gpu=1@", "after '@'"),
        ("gpu=1:a100@team a", "'team a'"),
        ("gpu=1@team-a+team=b", "'team=b'"),
        ("gpu=1@team-a+team-a", "repeated: team-a"),
    ],
)
def test_a_bad_pool_option_is_named(text: str, says: str) -> None:
    with pytest.raises(PoolOptionError, match=r".*") as exc:
        parse_pool(text)
    assert says in str(exc.value) and repr(text) in str(exc.value)


def test_every_bad_option_is_named_at_once() -> None:
    with pytest.raises(PoolOptionError) as exc:
        parse_pools(["gpu=0", "ok=1", "x.y=1"])
    assert "'gpu=0'" in str(exc.value) and "'x.y=1'" in str(exc.value)


def test_runners_are_named_by_pool_and_carry_their_settings() -> None:
    specs = runner_specs(2, [PoolRequest("gpu", 2, ("a100",))])
    assert [s.name for s in specs] == ["runner-0", "runner-1", "runner-gpu-0", "runner-gpu-1"]
    assert specs[0].env() == {"HEDDLE_POOL_NAMESPACES": ""}
    assert specs[2].env() == {
        "HEDDLE_RUNNER_POOL": "gpu",
        "HEDDLE_RUNNER_LABELS": "a100",
        "HEDDLE_POOL_NAMESPACES": "",
    }
    with pytest.raises(PoolOptionError, match="twice for gpu"):
        runner_specs(1, [PoolRequest("gpu", 1), PoolRequest("gpu", 2)])


def test_each_pools_runners_get_uids_of_their_own() -> None:
    from heddle.services.local.runner_pools import step_uids_of
    from heddle.services.runner_agent.isolation import step_uids_problem
    from heddle.shared.runtime.settings import Settings, step_uid_range

    settings = Settings.from_env({"HEDDLE_STEP_UIDS": "60600-60604"})
    specs = runner_specs(2, [PoolRequest("gpu", 2), PoolRequest("arm", 1)])
    uids = step_uid_range(settings.step_uids)
    own = {s.name: step_uids_of(uids, s) for s in specs if s.uid_offset}
    assert own == {
        "runner-gpu-0": "60602-60604",
        "runner-gpu-1": "60602-60604",
        "runner-arm-0": "60604-60604",
    }
    assert specs[2].env(own["runner-gpu-0"])["HEDDLE_STEP_UIDS"] == "60602-60604"
    names = [s.name for s in specs]
    # As root each runner's uid is its own (runner-gpu-1: 60603, runner-arm-0: 60604) ...
    assert step_uids_problem(settings, names, euid=0, step_uids=own) is None
    # ... which they would not be without their pool's range: runner-gpu-0 is runner-0's.
    assert "share step uid 60600" in (step_uids_problem(settings, names, euid=0) or "")


def test_a_pool_option_names_its_namespaces() -> None:
    assert parse_pool("gpu=1@team-a") == PoolRequest("gpu", 1, (), ("team-a",))
    assert parse_pool("gpu=2:a100@team-a+team-b") == PoolRequest(
        "gpu", 2, ("a100",), ("team-a", "team-b")
    )
    assert parse_pool("gpu=1@*") == PoolRequest("gpu", 1, (), ())
    assert parse_pool("gpu=1").namespaces is None


def test_heddle_ups_namespaces_go_to_the_pools_without_their_own() -> None:
    pools = parse_pools(["gpu=1", "arm=1@team-c", "big=1@*"])
    specs = {s.name: s for s in runner_specs(1, pools, ["team-a", "team-b"])}
    served = {name: s.env()["HEDDLE_POOL_NAMESPACES"] for name, s in specs.items()}
    assert served == {
        "runner-0": "",  # the default pool's take every namespace's steps
        "runner-gpu-0": "team-a,team-b",
        "runner-arm-0": "team-c",
        "runner-big-0": "",
    }


def test_every_bad_namespace_of_every_option_is_named() -> None:
    with pytest.raises(PoolOptionError) as exc:
        parse_pools(["gpu=1@a.b+ok", "arm=1@c d"])
    assert "'a.b'" in str(exc.value) and "'c d'" in str(exc.value)
