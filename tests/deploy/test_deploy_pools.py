"""The chart's runner pools (runners.pools): each pool its own set of single-replica
StatefulSets with its own image, resources, scheduling, labels, uid range and autoscaling
bounds; every rendered object valid Kubernetes 1.30; the pools told to the dispatcher and the
orchestrator (HEDDLE_RUNNER_POOLS) as the dispatcher reads them; and the values refused."""

from __future__ import annotations

import copy
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
from heddle.services.dispatcher.autoscale import Limits, Scaled
from heddle.services.dispatcher.autoscaling import pools_scaled
from heddle.shared.core.runner_pools import PoolSpec, parse_pools
from heddle.shared.runtime.settings import Settings

from tests.support.chart_render import KUBE_VERSION, Manifest, only_strings, render

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ARM_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
                    ]
                }
            ]
        }
    }
}
# The default pool and two more, each autoscaling on its own (arm at a fixed size).
POOLS: dict[str, Any] = {
    "runners": {
        "replicas": 2,
        "labels": ["linux"],
        "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 3},
        "pools": [
            {
                "name": "gpu",
                "stepUids": "61100-61199",
                "labels": ["cuda"],
                "namespaces": ["ml", "team-a"],
                "replicas": 1,
                "image": {"repository": "registry.example/heddle-cuda", "tag": "2.0"},
                "resources": {"limits": {"nvidia.com/gpu": 1}},
                "nodeSelector": {"accelerator": "nvidia"},
                "tolerations": [GPU_TOLERATION],
                "autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 4},
            },
            {
                "name": "big",
                "stepUids": "61200-61209",
                "replicas": 2,
                "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 5},
            },
            {"name": "arm", "stepUids": "61300-61309", "replicas": 2, "affinity": ARM_AFFINITY},
        ],
    },
    "nodeSelector": {"kubernetes.io/os": "linux"},
}
DEFAULT = [f"runner-{i}" for i in range(3)]
GPU = [f"runner-gpu-{i}" for i in range(4)]
BIG = [f"runner-big-{i}" for i in range(5)]
ARM = ["runner-arm-0", "runner-arm-1"]


@pytest.fixture(scope="module")
def pools(chart: helm.Chart) -> Manifest:
    return render(chart, POOLS)


def test_every_object_of_a_render_with_pools_is_valid_kubernetes(pools: Manifest) -> None:
    for obj in pools.objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{where}: {e.message} at {list(e.path)}")


def test_each_pool_is_its_own_statefulsets_each_scaled_on_its_own(pools: Manifest) -> None:
    runners = pools.runner_workloads()
    assert sorted(runners) == sorted(DEFAULT + GPU + BIG + ARM)  # the default keeps its names
    replicas = {name: w["spec"]["replicas"] for name, w in runners.items()}
    # With autoscaling, every runner the pool may grow to, its replicas of them (within its
    # bounds) at 1; without, its replicas, all at 1.
    assert [replicas[n] for n in DEFAULT] == [1, 1, 0]
    assert [replicas[n] for n in GPU] == [1, 0, 0, 0]
    assert [replicas[n] for n in BIG] == [1, 1, 0, 0, 0]
    assert [replicas[n] for n in ARM] == [1, 1]
    for name, w in runners.items():
        pool = "default" if name in DEFAULT else name.split("-")[1]
        assert w["metadata"]["labels"]["heddle/pool"] == pool
        assert w["spec"]["template"]["metadata"]["labels"]["heddle/pool"] == pool
        # Governed by the one headless Service, which selects every pool's pods.
        selector = pools.get("Service", w["spec"]["serviceName"])["spec"]["selector"]
        assert selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()


def test_each_runner_knows_its_pool_labels_namespaces_and_uid(pools: Manifest) -> None:
    containers = pools.heddle_containers()
    expected = {
        "runner-1": ("default", "linux", "", "60600-61099"),
        "runner-gpu-3": ("gpu", "cuda", "ml,team-a", "61100-61199"),
        "runner-big-4": ("big", "", "", "61200-61209"),
        "runner-arm-1": ("arm", "", "", "61300-61309"),
    }
    for name, (pool, labels, namespaces, uids) in expected.items():
        _, container = containers[name]
        settings = Settings.from_env(only_strings(pools.env(container)))
        assert (settings.runner_name, settings.runner_pool) == (name, pool)
        assert (settings.runner_labels, settings.step_uids) == (labels, uids)
        assert settings.pool_namespaces == namespaces


def test_each_pool_has_its_own_image_resources_and_scheduling(pools: Manifest) -> None:
    containers = pools.heddle_containers()
    default_pod, default_runner = containers["runner-0"]
    gpu_pod, gpu_runner = containers["runner-gpu-0"]
    big_pod, big_runner = containers["runner-big-0"]
    arm_pod, _ = containers["runner-arm-0"]
    assert gpu_runner["image"] == "registry.example/heddle-cuda:2.0"
    assert big_runner["image"] == default_runner["image"]  # the chart's image
    assert gpu_runner["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert big_runner["resources"] == default_runner["resources"]  # runners.resources
    assert gpu_pod["nodeSelector"] == {"accelerator": "nvidia"}
    assert gpu_pod["tolerations"] == [GPU_TOLERATION]
    assert arm_pod["affinity"] == ARM_AFFINITY
    for pod in (default_pod, big_pod, arm_pod):  # the chart's, where a pool sets none
        assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
        assert "tolerations" not in pod
    assert "affinity" not in default_pod


def test_the_dispatcher_scales_each_pool_within_its_own_bounds(pools: Manifest) -> None:
    _, dispatcher = pools.heddle_containers()["dispatcher"]
    settings = Settings.from_env(only_strings(pools.env(dispatcher)))
    assert settings.autoscale == "on"
    assert parse_pools(settings.runner_pools) == [
        PoolSpec("default", "runner-", ("default", "linux"), 1, 3, True),
        PoolSpec("gpu", "runner-gpu-", ("cuda", "gpu"), 0, 4, True, ("ml", "team-a")),
        PoolSpec("big", "runner-big-", ("big",), 2, 5, True),
        PoolSpec("arm", "runner-arm-", ("arm",), 2, 2, False),
    ]
    assert pools_scaled(settings) == (
        Scaled("default", "runner-", Limits(1, 3, 30.0, 300.0, 180.0)),
        Scaled("gpu", "runner-gpu-", Limits(0, 4, 30.0, 300.0, 180.0)),
        Scaled("big", "runner-big-", Limits(2, 5, 30.0, 300.0, 180.0)),
    )
    # The orchestrator is told the same pools; it hands no step to a runner (draining is the
    # dispatcher's).
    _, orchestrator = pools.heddle_containers()["orchestrator"]
    env = pools.env(orchestrator)
    assert env["HEDDLE_RUNNER_POOLS"] == settings.runner_pools
    assert env["HEDDLE_HANDOFF"] == "off"
    # get and patch on the scale of the autoscaled pools' StatefulSets alone.
    (rule,) = pools.get("Role", "heddle-autoscaler")["rules"]
    assert rule["resourceNames"] == DEFAULT + GPU + BIG
    assert rule["resources"] == ["statefulsets/scale"] and rule["verbs"] == ["get", "patch"]


def test_a_pool_alone_may_autoscale(chart: helm.Chart) -> None:
    values = {"runners": {"pools": [pool("gpu", "61100-61199", enabled=True)]}}
    manifest = render(chart, values)
    _, dispatcher = manifest.heddle_containers()["dispatcher"]
    settings = Settings.from_env(only_strings(manifest.env(dispatcher)))
    assert settings.autoscale == "on"
    assert [s.pool for s in pools_scaled(settings)] == ["gpu"]
    (rule,) = manifest.get("Role", "heddle-autoscaler")["rules"]
    assert rule["resourceNames"] == [f"runner-gpu-{i}" for i in range(8)]
    assert "dispatcher-kube-api" in manifest.of_kind("NetworkPolicy")
    with pytest.raises(helm.HelmRenderError, match=r"needs dispatcher\.replicas 1"):
        render(chart, {**values, "dispatcher": {"replicas": 2}})


def test_without_pools_the_services_are_told_none(default: Manifest) -> None:
    for key, (_, container) in default.heddle_containers().items():
        env = default.env(container)
        assert "HEDDLE_RUNNER_POOLS" not in env, key
        if key.startswith("runner-"):
            assert (env["HEDDLE_RUNNER_POOL"], env["HEDDLE_RUNNER_LABELS"]) == ("default", "")


def test_each_pool_has_its_own_disruption_budget(pools: Manifest) -> None:
    """One budget per pool, each selecting its pool's runners alone: the eviction API refuses
    a pod that two budgets select."""
    pdbs = {
        name: p
        for name, p in pools.of_kind("PodDisruptionBudget").items()
        if name.startswith("runner")
    }
    assert set(pdbs) == {"runner", "runner-gpu", "runner-big", "runner-arm"}
    covered: dict[str, str] = {}
    for name, pdb in pdbs.items():
        labels = pdb["spec"]["selector"]["matchLabels"]
        for runner, w in pools.runner_workloads().items():
            if labels.items() <= w["spec"]["template"]["metadata"]["labels"].items():
                assert runner not in covered, (runner, name, covered.get(runner))
                covered[runner] = name
    assert sorted(covered) == sorted(DEFAULT + GPU + BIG + ARM)
    assert {covered[n] for n in GPU} == {"runner-gpu"}


def test_every_pool_is_watched_and_fenced_as_runners(pools: Manifest) -> None:
    """The pod watch and the runners' NetworkPolicy select every pool's runner pods."""
    _, orchestrator = pools.heddle_containers()["orchestrator"]
    selector = Settings.from_env(only_strings(pools.env(orchestrator))).runner_pod_selector
    wanted = dict(pair.split("=") for pair in selector.split(","))
    policy = pools.get("NetworkPolicy", "runner")["spec"]["podSelector"]["matchLabels"]
    for name, w in pools.runner_workloads().items():
        labels = w["spec"]["template"]["metadata"]["labels"]
        assert wanted.items() <= labels.items(), name
        assert policy.items() <= labels.items(), name


def pool(name: str, uids: str, enabled: bool = False, **more: Any) -> dict[str, Any]:
    return {"name": name, "stepUids": uids, "autoscaling": {"enabled": enabled}, **more}


@pytest.mark.parametrize(
    ("runners", "why"),
    [
        ({"pools": [pool("gpu", "61000-61200")]}, "overlaps runners.stepUids 60600-61099"),
        ({"pools": [pool("gpu", "60000-60600")]}, "overlaps runners.stepUids"),
        (
            {"pools": [pool("gpu", "61100-61199"), pool("arm", "61150-61160")]},
            r"runners.pools\[arm\].stepUids 61150-61160 overlaps runners.pools\[gpu\].stepUids",
        ),
        (
            {"stepUids": "62000-62100", "pools": [pool("gpu", "62100")]},
            r"runners.pools\[gpu\].stepUids 62100 overlaps runners.stepUids 62000-62100",
        ),
        (
            {"pools": [pool("gpu", "61100-61102", enabled=True)]},
            r"runners.pools\[gpu\].stepUids 61100-61102 holds 3 uids, for 8 runners",
        ),
        ({"pools": [pool("gpu", "61100-61199"), pool("gpu", "61200-61299")]}, "two pools named"),
        (
            {
                "pools": [
                    {
                        "name": "gpu",
                        "stepUids": "61100-61199",
                        "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 2},
                    }
                ]
            },
            r"runners.pools\[gpu\].autoscaling.minReplicas must not exceed",
        ),
    ],
)
def test_pools_whose_runners_would_share_uids_or_cannot_scale_are_refused(
    chart: helm.Chart, runners: dict, why: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=why):
        render(chart, {"runners": runners})


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "gpu"},  # its own uid range is required
        {"stepUids": "61100-61199"},  # and a name
        {"name": "default", "stepUids": "61100-61199"},  # runners.* is the default pool
        {"name": "GPU", "stepUids": "61100-61199"},
        {"name": "7up", "stepUids": "61100-61199"},
        {"name": "a-very-long-pool-name-x", "stepUids": "61100-61199"},
        {"name": "gpu", "stepUids": "61100-61199", "size": 3},
        {"name": "gpu", "stepUids": "61100-61199", "labels": ["a,b"]},
        {"name": "gpu", "stepUids": "61100-61199", "labels": "cuda"},
        {"name": "gpu", "stepUids": "61100-61199", "replicas": -1},
        {"name": "gpu", "stepUids": "61100-61199", "image": {"repo": "x"}},
        {"name": "gpu", "stepUids": "61100-61199", "autoscaling": {"maxReplicas": 0}},
        {"name": "gpu", "stepUids": "61100-61199", "autoscaling": {"upAfterSeconds": 5}},
        {"name": "gpu", "stepUids": "61100-61199", "namespaces": "team-a"},
        {"name": "gpu", "stepUids": "61100-61199", "namespaces": ["team a"]},
        {"name": "gpu", "stepUids": "61100-61199", "namespaces": ["team=a"]},
        {"name": "gpu", "stepUids": "61100-61199", "namespaces": [""]},
        {"name": "gpu", "stepUids": "61100-61199", "namespaces": ["ml", "ml"]},
    ],
)
def test_values_schema_validates_each_pool(chart: helm.Chart, entry: dict) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(chart, {"runners": {"pools": [entry]}})


def test_lint_passes_strict_with_pools() -> None:
    from tests.support.chart_render import CHART_DIR

    report = helm.lint(
        CHART_DIR, copy.deepcopy(POOLS), strict=True, kube_version="v" + KUBE_VERSION
    )
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
