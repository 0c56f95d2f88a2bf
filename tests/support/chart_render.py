"""Rendering the Helm chart offline for the deployment tests: helm-python-sdk renders it with
Helm's own Go code, and each render is parsed into a ``Manifest`` to query. The ``chart`` and
``default`` fixtures are in tests/conftest.py."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from heddle.shared.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "deploy" / "helm" / "heddle"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
KIND_UP = ROOT / "deploy" / "kind" / "up.sh"

KUBE_VERSION = "1.30.0"
RELEASE = "heddle"
NAMESPACE = "heddle-test"
CONTROL_PLANE = ("gateway", "orchestrator", "dispatcher")
DEFAULT_RUNNERS = ("runner-0", "runner-1")
# Settings the chart sets itself, per container: each runner's name, each service's NATS user and
# password, the gateway's admin token and Host names, the runners' step user and uids
# (runners.stepUser, runners.stepUids),
# the orchestrator's pod watch (podWatch.enabled, the release's runner labels).
NOT_CHART_SETTINGS = {
    "runner_name",
    "dispatcher_name",  # each dispatcher pod's own: its pod name
    "orchestrator_name",  # each orchestrator pod's own: its pod name
    "pod_name",
    "node_name",
    "nats_user",
    "nats_password",
    "nats_password_file",
    "admin_token_file",
    "allowed_hosts",
    "step_user",
    "step_uids",
    "pod_watch",  # the orchestrator's, from podWatch.enabled
    "runner_pod_selector",  # the orchestrator's: this release's runner pods
    # The dispatcher's, from runners.autoscaling: the values and this release's StatefulSets.
    "autoscale",
    "autoscale_min",
    "autoscale_max",
    "autoscale_up_after",
    "autoscale_idle_after",
    "autoscale_interval",
    "autoscale_start_timeout",
    "runner_statefulset_prefix",
    "nats_gomaxprocs",  # `heddle up`'s embedded server's; the chart's NATS has its own limits
    # Each runner's pool and labels (runners.pools), and the pools the dispatcher and the
    # orchestrator are told of.
    "runner_pool",
    "runner_labels",
    "pool_namespaces",  # each pool's, from runners.pools[].namespaces
    "runner_pools",
}
USERS_SECRET = "heddle-nats-users"
AUTH_SECRET = "nats-auth"
ADMIN_SECRET = "heddle-admin-token"
SETTING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Settings)}


# --- rendering ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Manifest:
    """One render of the chart, parsed."""

    objects: list[dict[str, Any]]
    notes: str = ""

    def of_kind(self, kind: str) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in self.objects if o["kind"] == kind}

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert name in found, f"no {kind} {name!r}; have {sorted(found)}"
        return found[name]

    def workloads(self) -> Iterator[dict[str, Any]]:
        for o in self.objects:
            if o["kind"] in ("Deployment", "StatefulSet"):
                yield o

    def heddle_containers(self) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
        """{component: (pod spec, container)} for the Heddle services; a runner's key is its
        name (runner-0 ...): each runner is a workload of its own."""
        out = {}
        for w in self.workloads():
            labels = w["spec"]["template"]["metadata"]["labels"]
            component = labels["app.kubernetes.io/component"]
            if component in ("nats", "nats-box"):
                continue
            key = labels["heddle/runner"] if component == "runner" else component
            assert key not in out, f"two workloads for {key}"
            pod = w["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            out[key] = (pod, container)
        return out

    def runner_workloads(self) -> dict[str, dict[str, Any]]:
        return {
            w["metadata"]["name"]: w
            for w in self.workloads()
            if w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
            == "runner"
        }

    def workloads_by_key(self) -> dict[str, dict[str, Any]]:
        """The workloads under heddle_containers()'s keys."""
        out = {}
        for w in self.workloads():
            labels = w["spec"]["template"]["metadata"]["labels"]
            component = labels["app.kubernetes.io/component"]
            out[labels["heddle/runner"] if component == "runner" else component] = w
        return out

    def secret_data(self, name: str) -> dict[str, str]:
        return {
            k: base64.b64decode(v).decode() for k, v in self.get("Secret", name)["data"].items()
        }

    def env(self, container: dict[str, Any]) -> dict[str, Any]:
        """The container's environment as Kubernetes builds it: envFrom ConfigMaps first, then
        env (which wins). valueFrom entries stay as their source dict."""
        env: dict[str, Any] = {}
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                cm = self.get("ConfigMap", source["configMapRef"]["name"])
                prefix = source.get("prefix", "")
                env.update({prefix + k: v for k, v in cm.get("data", {}).items()})
        for entry in container.get("env", []):
            env[entry["name"]] = entry["value"] if "value" in entry else entry["valueFrom"]
        return env


def load_chart() -> Iterator[helm.Chart]:
    """The chart, loaded once per test module (tests/conftest.py's ``chart`` fixture)."""
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> Manifest:
    rendered = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    objects = []
    notes = ""
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            notes = text
        if not path.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(text):
            if doc is None:
                continue
            assert isinstance(doc, dict), f"{path}: not a mapping: {doc!r}"
            for key in ("apiVersion", "kind", "metadata"):
                assert key in doc, f"{path}: object without {key}"
            objects.append(doc)
    return Manifest(objects, notes)


def only_strings(env: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in env.items() if isinstance(v, str)}


def nats_url_target(manifest: Manifest) -> tuple[str, int]:
    """The NATS Service's name and client port."""
    (nats_svc,) = [
        s
        for s in manifest.of_kind("Service").values()
        if s["spec"]["selector"].get("app.kubernetes.io/component") == "nats"
        and s["spec"].get("clusterIP") != "None"
    ]
    (client,) = [p for p in nats_svc["spec"]["ports"] if p["name"] == "client"]
    return nats_svc["metadata"]["name"], client["port"]


# --- the chart: every object is valid Kubernetes 1.30 --------------------------------------------
