"""The chart's part of a rolling upgrade (docs/upgrading.md, "With the Helm chart"): the
control plane rolls a new pod in, ready, before an old one leaves (but the dispatcher that
scales the runners, never two at once), a drain takes one pod of each service of several at
a time, and the runners are replaced at once or, with ``runners.updateStrategy: OnDelete``,
one at a time as the operator deletes them. The grace periods that let a runner drain its
step are checked in test_deploy.py (test_a_grace_period_too_short_is_refused)."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from tests.support.chart_render import CONTROL_PLANE, KUBE_VERSION, Manifest, render

ROLLING = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
SEVERAL = {
    "gateway": {"replicas": 2},
    "orchestrator": {"replicas": 2},
    "dispatcher": {"replicas": 2},
    "runners": {"replicas": 3, "updateStrategy": "OnDelete"},
}


def pods_of(manifest: Manifest, name: str) -> list[str]:
    """The workloads whose pods a disruption budget selects."""
    labels = manifest.get("PodDisruptionBudget", name)["spec"]["selector"]["matchLabels"]
    return sorted(
        w["metadata"]["name"]
        for w in manifest.workloads()
        if labels.items() <= w["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_control_plane_rolls_a_ready_pod_in_before_an_old_one_leaves(
    default: Manifest,
) -> None:
    for name in CONTROL_PLANE:
        deployment = default.get("Deployment", name)
        assert deployment["spec"]["strategy"] == ROLLING, name
        # The rollout waits for the new pod's readiness: NATS connected, consumers bound.
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", name


def test_the_dispatcher_that_scales_the_runners_is_never_two(chart: helm.Chart) -> None:
    scaled = render(chart, {"runners": {"autoscaling": {"enabled": True}}})
    assert scaled.get("Deployment", "dispatcher")["spec"]["strategy"] == {"type": "Recreate"}
    for name in ("gateway", "orchestrator"):
        assert scaled.get("Deployment", name)["spec"]["strategy"] == ROLLING


def test_a_drain_takes_one_pod_of_each_service_at_a_time(chart: helm.Chart) -> None:
    several = render(chart, SEVERAL)
    for name in CONTROL_PLANE:
        budget = several.get("PodDisruptionBudget", name)
        assert budget["spec"]["maxUnavailable"] == 1
        assert pods_of(several, name) == [name]
    runners = several.get("PodDisruptionBudget", "runner")
    assert runners["spec"]["maxUnavailable"] == 1
    assert pods_of(several, "runner") == sorted(several.runner_workloads())


def test_runners_may_wait_to_be_replaced_one_at_a_time(chart: helm.Chart) -> None:
    for runner in render(chart).runner_workloads().values():
        assert runner["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    several = render(chart, SEVERAL)
    assert len(several.runner_workloads()) == 3
    for runner in several.runner_workloads().values():
        assert runner["spec"]["updateStrategy"] == {"type": "OnDelete"}
    for obj in several.objects:
        validate(obj)


@pytest.mark.parametrize("strategy", ["Partition", "Recreate", ""])
def test_an_unknown_runner_update_strategy_is_refused(chart: helm.Chart, strategy: str) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(chart, {"runners": {"updateStrategy": strategy}})


def validate(obj: dict[str, Any]) -> None:
    where = f"{obj['kind']}/{obj['metadata']['name']}"
    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        pytest.fail(f"{where}: {e.message} at {list(e.path)}")
