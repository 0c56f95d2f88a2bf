"""Runner pools restricted to namespaces: the rule (shared/core/pool_namespaces.py)."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from heddle.shared.core.pool_namespaces import (
    namespace_refusal,
    parse_namespaces,
    pool_namespaces_problems,
    serves,
    submit_refusals,
    takes_step,
)
from heddle.shared.wire.contracts import RunnerInfo, StepSpec, SubmitRun

RUNS = {"default": "r1", "team-a": "team-a=r1", "team-b": "team-b=r1"}


def runner(pool: str = "default", labels: tuple[str, ...] = (), *ns: str) -> RunnerInfo:
    return RunnerInfo(
        name=f"runner-{pool}",
        status="idle",
        pid=1,
        version="",
        started_at="",
        seen_at="",
        pool=pool,
        labels=list(labels),
        namespaces=list(ns),
    )


def test_the_setting_is_comma_separated_and_blanks_are_every_namespace() -> None:
    assert parse_namespaces(" team-a, ,team-b ") == ["team-a", "team-b"]
    assert parse_namespaces("") == []


def test_every_problem_of_a_runners_namespaces_is_named() -> None:
    problems = pool_namespaces_problems(["ok", "a b", "x=y", "ok"])
    assert len(problems) == 3
    assert "'a b'" in problems[0] and "'x=y'" in problems[1] and "repeated: ok" in problems[2]
    assert pool_namespaces_problems(["team-a", "default"]) == []


@pytest.mark.parametrize(
    ("served", "namespace"),
    list(itertools.product([(), ("team-a",), ("default",), ("team-a", "team-b")], RUNS)),
)
def test_a_runner_serves_its_namespaces_alone_or_every_one(
    served: tuple[str, ...], namespace: str
) -> None:
    assert serves(served, RUNS[namespace]) == (not served or namespace in served)


def test_a_step_is_taken_by_labels_and_namespace_together() -> None:
    gpu_a = runner("gpu", ("a100",), "team-a")
    assert takes_step(gpu_a, ["gpu"], "team-a=r")
    assert takes_step(gpu_a, ["gpu", "a100"], "team-a=r")
    assert not takes_step(gpu_a, ["gpu"], "team-b=r")  # the namespace
    assert not takes_step(gpu_a, ["gpu"], "r")  # default is a namespace like another
    assert not takes_step(gpu_a, [], "team-a=r")  # the labels: not the default pool
    assert takes_step(runner(), [], "team-b=r")  # a runner with none takes every one


def test_a_step_refused_because_of_namespaces_names_the_pool_and_the_namespace() -> None:
    runners = [runner(), runner("gpu", (), "team-a")]
    why = namespace_refusal(runners, ["gpu"], "team-b=r")
    assert why == "pool gpu serves namespace team-a only; this run is in namespace team-b"
    assert namespace_refusal(runners, ["gpu"], "team-a=r") is None
    assert namespace_refusal(runners, [], "team-b=r") is None  # the default pool serves all
    assert namespace_refusal(runners, ["tpu"], "team-b=r") is None  # the labels' matter


def test_one_runner_that_serves_the_namespace_is_enough() -> None:
    runners = [runner("gpu", (), "team-a"), runner("gpu", (), "team-b")]
    assert namespace_refusal(runners, ["gpu"], "team-b=r") is None
    two = [runner("gpu", (), "team-a", "team-c"), runner("big", ("gpu",), "team-d")]
    assert namespace_refusal(two, ["gpu"], "r") == (
        "pool big serves namespace team-d only, pool gpu serves namespaces team-a, team-c "
        "only; this run is in namespace default"
    )


def test_submit_refuses_each_step_no_runner_may_take_for_its_namespace() -> None:
    runners = [runner(), runner("gpu", (), "team-a")]
    cmd = SubmitRun(
        run_id="team-b=r",
        submitted_at="2026-01-01T00:00:00Z",
        steps=[
            StepSpec(id="prep", command="true"),
            StepSpec(id="train", command="true", runs_on=["gpu"]),
        ],
        on_exit=[StepSpec(id="tidy", command="true", runs_on=["gpu"])],
    )
    problems = submit_refusals(runners, cmd)
    assert [p.path for p in problems] == ["steps[1].runsOn", "onExit[0].runsOn"]
    assert "step train: pool gpu serves namespace team-a only" in problems[0].message
    assert "namespace team-b" in problems[0].message
    assert submit_refusals(runners, msgspec.structs.replace(cmd, run_id="team-a=r")) == []
    assert submit_refusals([runner(), runner("gpu")], cmd) == []


def test_a_runners_setting_names_every_bad_namespace() -> None:
    from heddle.shared.runtime.settings import Settings
    from heddle.shared.wire.errors import SettingsError

    with pytest.raises(SettingsError) as exc:
        Settings.from_env({"HEDDLE_POOL_NAMESPACES": "team-a,a b,x=y"})
    assert [p for p in exc.value.problems if "HEDDLE_POOL_NAMESPACES" in p] == [
        "HEDDLE_POOL_NAMESPACES: namespace 'a b' must match ^[A-Za-z0-9_-]{1,64}\\Z",
        "HEDDLE_POOL_NAMESPACES: namespace 'x=y' must match ^[A-Za-z0-9_-]{1,64}\\Z",
    ]
    assert Settings.from_env({"HEDDLE_POOL_NAMESPACES": "team-a"}).pool_namespaces == "team-a"
