"""The deployment files: the Helm chart, docker-compose.yml, the Dockerfile and the kind script.

All offline, with no docker engine, cluster or helm binary: helm-python-sdk renders and lints
the chart with Helm's own Go code, kubernetes-validate checks every rendered object against the
Kubernetes 1.30 OpenAPI schemas, and check-jsonschema checks docker-compose.yml against the
Compose Specification.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import helm_python as helm
import kubernetes_validate
import nats
import pytest
import yaml

from services.embedded_nats import find_binary, free_port, port_open
from shared import names
from shared import nats_permissions as perms
from shared.hosts import AllowedHosts
from shared.nats_io import connect
from shared.resources import ensure_resources
from shared.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
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
# password, the gateway's admin token and Host names, the runners' step user (runners.stepUser).
NOT_CHART_SETTINGS = {
    "runner_name",
    "pod_name",
    "node_name",
    "nats_user",
    "nats_password",
    "nats_password_file",
    "admin_token_file",
    "allowed_hosts",
    "step_user",
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
            if component == "nats":
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


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
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


@pytest.fixture(scope="module")
def default(chart: helm.Chart) -> Manifest:
    return render(chart)


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

VALUE_SETS = {
    "defaults": {},
    "five-runners": {"runners": {"replicas": 5}},
    "everything-set": {
        "namePrefix": "blue-",
        "image": {"repository": "registry.example/heddle", "tag": "1.2.3", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "settingsSecret": "heddle-secrets",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "heddle", "operator": "Exists", "effect": "NoSchedule"}],
        "podAnnotations": {"example.com/team": "ci"},
        "podLabels": {"example.com/tier": "batch"},
        "settings": {"heartbeatInterval": 2.5, "maxBodyBytes": 16777216, "logLevel": "debug"},
        "gateway": {
            "replicas": 2,
            "service": {"type": "NodePort"},
            "extraEnv": [{"name": "EXTRA", "value": "1"}],
        },
        "runners": {
            "replicas": 3,
            "stepUser": "nobody",
            "networkPolicy": {"egress": [{}]},
        },
        "nats": {
            "persistence": {"enabled": False},
            "extraArgs": ["--max_payload", "8MB"],
            "networkPolicy": {
                "monitorFrom": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
                "clientFrom": [{"podSelector": {"matchLabels": {"app": "nats-box"}}}],
            },
        },
        "rbac": {"create": True},
        "clusterDomain": "corp.internal",
        "networkPolicy": {"dnsTo": [{"namespaceSelector": {}}]},
    },
    "external-nats-no-rbac": {
        "nats": {"enabled": False},
        "settings": {"natsUrl": "nats://nats.example:4222"},
        "rbac": {"create": False},
        "serviceAccount": {"create": False},
        "networkPolicy": {
            "externalNats": {"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "port": 4223}
        },
    },
    "no-network-policy": {"networkPolicy": {"enabled": False}},
    "open-gateway-no-runners": {
        "gateway": {"networkPolicy": {"from": []}},
        "runners": {"replicas": 0},
    },
}


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_rendered_object_is_valid_kubernetes(chart: helm.Chart, values: dict) -> None:
    manifest = render(chart, values)
    assert len(manifest.of_kind("Deployment")) == 3
    runners = (values.get("runners") or {}).get("replicas", 2)
    assert len(manifest.runner_workloads()) == runners
    for obj in manifest.objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            pytest.fail(f"{where}: no Kubernetes {KUBE_VERSION} schema for {obj['apiVersion']}")
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{where}: {e.message} at {list(e.path)}")


def test_the_validator_rejects_a_broken_object(default: Manifest) -> None:
    # Guards the test above: strict validation must catch a misspelt field.
    deployment = json.loads(json.dumps(default.get("Deployment", "gateway")))
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


# --- the chart: what it runs ----------------------------------------------------------------------


def test_default_render_runs_the_control_plane_runners_and_nats(default: Manifest) -> None:
    deployments = default.of_kind("Deployment")
    assert set(deployments) == set(CONTROL_PLANE)
    for name, d in deployments.items():
        assert d["spec"]["replicas"] == 1
        (container,) = d["spec"]["template"]["spec"]["containers"]
        assert container["args"] == ["heddle", name]
        assert container["image"] == f"heddle:{default_app_version()}"
    # Never two orchestrators or dispatchers at once, not even during a rollout.
    assert deployments["orchestrator"]["spec"]["strategy"] == {"type": "Recreate"}
    assert deployments["dispatcher"]["spec"]["strategy"] == {"type": "Recreate"}

    statefulsets = default.of_kind("StatefulSet")
    assert set(statefulsets) == {*DEFAULT_RUNNERS, "nats"}
    for name in DEFAULT_RUNNERS:  # one single-replica StatefulSet per runner
        runner = statefulsets[name]
        assert runner["spec"]["replicas"] == 1
        assert runner["spec"]["template"]["spec"]["containers"][0]["args"] == ["heddle", "runner"]
    for sts in statefulsets.values():  # each governed by a headless Service that exists
        governing = default.get("Service", sts["spec"]["serviceName"])
        assert governing["spec"]["clusterIP"] == "None"
    assert statefulsets["nats"]["spec"]["replicas"] == 1

    services = default.of_kind("Service")
    assert [(p["name"], p["port"]) for p in services["gateway"]["spec"]["ports"]] == [
        ("http", 8080)
    ]
    assert [(p["name"], p["port"]) for p in services["nats"]["spec"]["ports"]] == [
        ("client", 4222),
        ("monitor", 8222),
    ]
    # Every Service selects the pods of exactly one workload, but the runners' headless Service,
    # which governs every runner StatefulSet.
    for svc in services.values():
        selector = svc["spec"]["selector"]
        matched = {
            w["metadata"]["name"]
            for w in default.workloads()
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        }
        expected = 2 if svc["metadata"]["name"] == "runner" else 1
        assert len(matched) == expected, (svc["metadata"]["name"], matched)
    assert matched_by(default, "runner") == set(DEFAULT_RUNNERS)
    assert set(default.of_kind("ServiceAccount")) == {"heddle", "heddle-runner"}
    assert set(default.of_kind("ConfigMap")) == {"heddle-settings"}


def matched_by(manifest: Manifest, service: str) -> set[str]:
    selector = manifest.get("Service", service)["spec"]["selector"]
    return {
        w["metadata"]["name"]
        for w in manifest.workloads()
        if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
    }


def default_app_version() -> str:
    return yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"]


@pytest.mark.parametrize("replicas", [0, 1, 5])
def test_runner_replicas_value_is_honoured(chart: helm.Chart, replicas: int) -> None:
    manifest = render(chart, {"runners": {"replicas": replicas}})
    runners = manifest.runner_workloads()
    assert set(runners) == {f"runner-{i}" for i in range(replicas)}
    for name, runner in runners.items():
        assert runner["spec"]["replicas"] == 1, name
        assert runner["spec"]["serviceName"] == "runner", name
    # The other workloads do not follow it.
    assert manifest.get("StatefulSet", "nats")["spec"]["replicas"] == 1
    for d in manifest.of_kind("Deployment").values():
        assert d["spec"]["replicas"] == 1


def test_runner_name_and_node_come_from_the_downward_api(default: Manifest) -> None:
    containers = default.heddle_containers()
    assert set(containers) == {*CONTROL_PLANE, *DEFAULT_RUNNERS}
    for key, (_, container) in containers.items():
        env = default.env(container)
        assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}, key
        assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, key
        # A runner's name is fixed (its NATS user names it), not its pod's (runner-0-0).
        if key in DEFAULT_RUNNERS:
            assert env["HEDDLE_RUNNER_NAME"] == key
            assert Settings.from_env(only_strings(env)).runner_name == key
        else:
            assert "HEDDLE_RUNNER_NAME" not in env, key


def test_every_heddle_container_points_at_the_nats_service(default: Manifest) -> None:
    service, port = nats_url_target(default)
    assert (service, port) == ("nats", 4222)
    for component, (_, container) in default.heddle_containers().items():
        url = urlsplit(default.env(container)["HEDDLE_NATS_URL"])
        assert (url.scheme, url.hostname, url.port) == ("nats", service, port), component
    nats = default.get("StatefulSet", "nats")["spec"]["template"]["spec"]
    (server,) = nats["containers"]
    assert [(p["name"], p["containerPort"]) for p in server["ports"]] == [
        ("client", 4222),
        ("monitor", 8222),
    ]
    image, tag = server["image"].split(":")
    assert image == "nats"
    assert tuple(int(n) for n in re.match(r"(\d+)\.(\d+)", tag).groups()) >= (2, 14)
    assert "--jetstream" in server["args"]
    assert "--store_dir=/data" in server["args"]
    assert {"name": "data", "mountPath": "/data"} in server["volumeMounts"]


def test_nats_storage_is_a_claim_or_an_empty_dir(chart: helm.Chart, default: Manifest) -> None:
    nats = default.get("StatefulSet", "nats")["spec"]
    (claim,) = nats["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert "storageClassName" not in claim["spec"]

    sized = render(chart, {"nats": {"persistence": {"size": "20Gi", "storageClass": "fast"}}})
    (claim,) = sized.get("StatefulSet", "nats")["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["spec"]["storageClassName"] == "fast"

    ephemeral = render(chart, {"nats": {"persistence": {"enabled": False}}})
    nats = ephemeral.get("StatefulSet", "nats")["spec"]
    assert "volumeClaimTemplates" not in nats
    assert {"name": "data", "emptyDir": {}} in nats["template"]["spec"]["volumes"]


def test_external_nats(chart: helm.Chart) -> None:
    manifest = render(
        chart, {"nats": {"enabled": False}, "settings": {"natsUrl": "nats://broker.example:4222"}}
    )
    assert "nats" not in manifest.of_kind("StatefulSet")
    assert not [s for s in manifest.of_kind("Service") if "nats" in s]
    for component, (_, container) in manifest.heddle_containers().items():
        assert manifest.env(container)["HEDDLE_NATS_URL"] == "nats://broker.example:4222", component
    with pytest.raises(helm.HelmRenderError, match=r"settings\.natsUrl"):
        render(chart, {"nats": {"enabled": False}})


def test_name_prefix_renames_everything(chart: helm.Chart) -> None:
    manifest = render(chart, {"namePrefix": "blue-"})
    assert set(manifest.of_kind("Deployment")) == {f"blue-{c}" for c in CONTROL_PLANE}
    assert set(manifest.of_kind("StatefulSet")) == {"blue-runner-0", "blue-runner-1", "blue-nats"}
    for _, container in manifest.heddle_containers().values():
        assert manifest.env(container)["HEDDLE_NATS_URL"] == "nats://blue-nats:4222"
    with pytest.raises(helm.HelmValuesError):
        render(chart, {"namePrefix": "Blue"})


# --- the chart: settings --------------------------------------------------------------------------


def camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


def test_chart_settings_are_exactly_heddles_settings() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    in_schema = set(schema["properties"]["settings"]["properties"])
    expected = {camel(f) for f in SETTING_DEFAULTS if f not in NOT_CHART_SETTINGS}
    assert in_schema == expected, (
        f"values.schema.json settings drifted from shared/settings.py: "
        f"missing {sorted(expected - in_schema)}, unknown {sorted(in_schema - expected)}"
    )
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert set(values["settings"]) <= in_schema
    # The chart's grace guard uses these; they must be the services' own defaults.
    assert values["settings"]["killGrace"] == SETTING_DEFAULTS["kill_grace"]
    assert values["settings"]["shutdownGrace"] == SETTING_DEFAULTS["shutdown_grace"]


def test_default_settings_parse_as_heddle_settings(default: Manifest) -> None:
    for component, (_, container) in default.heddle_containers().items():
        env = only_strings(default.env(container))
        assert all(k.startswith("HEDDLE_") for k in env), component
        settings = Settings.from_env({**env, "POD_NAME": "runner-0"})
        assert settings.nats_url == "nats://nats:4222"
        assert settings.gateway_host == "0.0.0.0"
        assert settings.gateway_port == 8080
        assert settings.replicas == 1
        assert settings.storage == "file"
        assert settings.shutdown_grace == SETTING_DEFAULTS["shutdown_grace"]
        # Settings the values leave out keep the services' defaults.
        assert "HEDDLE_HEARTBEAT_INTERVAL" not in env
        assert settings.heartbeat_interval == SETTING_DEFAULTS["heartbeat_interval"]


def test_a_setting_override_reaches_every_service(chart: helm.Chart, default: Manifest) -> None:
    overrides = {
        "heartbeatInterval": 2.5,
        "watchdogScan": 0.5,
        "maxBodyBytes": 16777216,  # float64 in Helm: must not come out as 1.6777216e+07
        "logMaxBytes": 4 * 1024**3,
        "registryTtl": 30,
        "logLevel": "debug",
    }
    manifest = render(chart, {"settings": overrides})
    containers = manifest.heddle_containers()
    assert set(containers) == {*CONTROL_PLANE, *DEFAULT_RUNNERS}
    for component, (_, container) in containers.items():
        env = manifest.env(container)
        assert env["HEDDLE_HEARTBEAT_INTERVAL"] == "2.5", component
        assert env["HEDDLE_WATCHDOG_SCAN"] == "0.5", component
        assert env["HEDDLE_MAX_BODY_BYTES"] == "16777216", component
        assert env["HEDDLE_LOG_MAX_BYTES"] == "4294967296", component
        assert env["HEDDLE_REGISTRY_TTL"] == "30", component
        assert env["HEDDLE_LOG_LEVEL"] == "debug", component
        settings = Settings.from_env(only_strings(env))
        assert settings.heartbeat_interval == 2.5
        assert settings.watchdog_scan == 0.5
        assert settings.max_body_bytes == 16777216
        assert settings.log_max_bytes == 4 * 1024**3
        assert settings.registry_ttl == 30.0
    # A settings change restarts the pods: their template's checksum changes.
    key = "checksum/settings"
    for name in CONTROL_PLANE:
        before = default.get("Deployment", name)["spec"]["template"]["metadata"]["annotations"]
        after = manifest.get("Deployment", name)["spec"]["template"]["metadata"]["annotations"]
        assert before[key] != after[key]


def test_extra_env_goes_to_one_service_only(chart: helm.Chart) -> None:
    manifest = render(
        chart, {"runners": {"extraEnv": [{"name": "HEDDLE_LOG_LEVEL", "value": "debug"}]}}
    )
    for component, (_, container) in manifest.heddle_containers().items():
        expected = "debug" if component.startswith("runner") else "info"
        assert manifest.env(container)["HEDDLE_LOG_LEVEL"] == expected, component


def test_values_schema_rejects_typos_and_bad_settings(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmValuesError, match="heartbeatIntervall"):
        render(chart, {"settings": {"heartbeatIntervall": 5}})
    with pytest.raises(helm.HelmValuesError):
        render(chart, {"settings": {"heartbeatInterval": 0}})
    with pytest.raises(helm.HelmValuesError):
        render(chart, {"settings": {"storage": "disk"}})
    with pytest.raises(helm.HelmValuesError):
        render(chart, {"settings": {"runnerName": "fixed"}})  # would name every runner alike
    with pytest.raises(helm.HelmRenderError, match=r"settings\.replicas"):
        render(chart, {"settings": {"replicas": 3}})


# --- the chart: shutdown, probes, security, RBAC -------------------------------------------------


def grace(env: dict[str, Any], name: str, field: str) -> float:
    return float(env.get(name, SETTING_DEFAULTS[field]))


def assert_grace_periods_fit(manifest: Manifest) -> None:
    for component, (pod, container) in manifest.heddle_containers().items():
        env = manifest.env(container)
        shutdown = grace(env, "HEDDLE_SHUTDOWN_GRACE", "shutdown_grace")
        needed = shutdown
        if component.startswith("runner"):  # the step's kill, then up to 5 s for it to exit
            needed += grace(env, "HEDDLE_KILL_GRACE", "kill_grace") + 5
        assert pod["terminationGracePeriodSeconds"] > needed, (component, needed)


def test_termination_grace_exceeds_the_shutdown_grace(chart: helm.Chart, default: Manifest) -> None:
    assert_grace_periods_fit(default)
    tgps = {
        c: p["terminationGracePeriodSeconds"] for c, (p, _) in default.heddle_containers().items()
    }
    assert tgps == {
        "gateway": 20,
        "orchestrator": 20,
        "dispatcher": 20,
        "runner-0": 30,
        "runner-1": 30,
    }
    longer = render(
        chart,
        {
            "settings": {"shutdownGrace": 40, "killGrace": 15},
            **{c: {"terminationGracePeriodSeconds": 45} for c in CONTROL_PLANE},
            "runners": {"terminationGracePeriodSeconds": 70},
        },
    )
    assert_grace_periods_fit(longer)
    assert (
        longer.get("StatefulSet", "runner-0")["spec"]["template"]["spec"][
            "terminationGracePeriodSeconds"
        ]
        == 70
    )


@pytest.mark.parametrize(
    "values",
    [
        {"gateway": {"terminationGracePeriodSeconds": 10}},
        {"dispatcher": {"terminationGracePeriodSeconds": 5}},
        {"runners": {"terminationGracePeriodSeconds": 15}},  # = kill 5 + shutdown 10
        {"runners": {"terminationGracePeriodSeconds": 20}},  # ... + the runner's 5 s wait
        {"settings": {"shutdownGrace": 25}},
        {"settings": {"killGrace": 30}},
    ],
)
def test_a_grace_period_too_short_is_refused(chart: helm.Chart, values: dict) -> None:
    with pytest.raises(helm.HelmRenderError, match="terminationGracePeriodSeconds"):
        render(chart, values)


def test_gateway_probes_and_port(default: Manifest) -> None:
    _, gateway = default.heddle_containers()["gateway"]
    env = default.env(gateway)
    assert env["HEDDLE_GATEWAY_HOST"] == "0.0.0.0"
    (port,) = gateway["ports"]
    assert (port["name"], port["containerPort"]) == ("http", int(env["HEDDLE_GATEWAY_PORT"]))
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert gateway["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    svc_port = default.get("Service", "gateway")["spec"]["ports"][0]
    assert (svc_port["port"], svc_port["targetPort"]) == (8080, "http")


def test_resources_come_from_values(chart: helm.Chart, default: Manifest) -> None:
    for w in default.workloads():
        for c in w["spec"]["template"]["spec"]["containers"]:
            assert c["resources"]["requests"]["cpu"], c["name"]
            assert c["resources"]["requests"]["memory"], c["name"]
            assert c["resources"]["limits"]["memory"], c["name"]
    custom = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi", "cpu": "4"}}
    manifest = render(chart, {"runners": {"resources": custom}})
    for name in DEFAULT_RUNNERS:
        _, runner = manifest.heddle_containers()[name]
        assert runner["resources"] == custom


def test_pods_run_as_non_root_without_privileges(default: Manifest) -> None:
    runners = default.runner_workloads()
    for w in default.workloads():
        pod = w["spec"]["template"]["spec"]
        name = w["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 10001, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], name
            if name in runners:  # root, to switch to the step user: see the runner's own test
                continue
            assert "runAsUser" not in c["securityContext"], name
            assert "runAsNonRoot" not in c["securityContext"], name
            assert "add" not in c["securityContext"]["capabilities"], name
    for component in (*CONTROL_PLANE, "nats"):
        w = next(x for x in default.workloads() if x["metadata"]["name"] == component)
        (c,) = w["spec"]["template"]["spec"]["containers"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True, component


def test_rbac_is_minimal(chart: helm.Chart, default: Manifest) -> None:
    # Heddle never calls the Kubernetes API: by default no RBAC and no token in any pod, so a
    # step finds none to read.
    assert not default.of_kind("ClusterRole")
    assert not default.of_kind("ClusterRoleBinding")
    assert not default.of_kind("Role")
    assert not default.of_kind("RoleBinding")
    containers = default.heddle_containers()
    for name in DEFAULT_RUNNERS:
        runner_pod, _ = containers[name]
        assert runner_pod["serviceAccountName"] == "heddle-runner"
        assert runner_pod["automountServiceAccountToken"] is False
    assert default.get("ServiceAccount", "heddle-runner")["automountServiceAccountToken"] is False
    for component in CONTROL_PLANE:
        pod, _ = containers[component]
        assert pod["serviceAccountName"] == "heddle", component
        assert pod["automountServiceAccountToken"] is False, component
    nats_pod = default.get("StatefulSet", "nats")["spec"]["template"]["spec"]
    assert nats_pod["automountServiceAccountToken"] is False

    # rbac.create: runners may `get` pods, nothing else, and mount the token for it.
    with_rbac = render(chart, {"rbac": {"create": True}})
    assert not with_rbac.of_kind("ClusterRole")
    assert not with_rbac.of_kind("ClusterRoleBinding")
    (role,) = with_rbac.of_kind("Role").values()
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    (binding,) = with_rbac.of_kind("RoleBinding").values()
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "heddle-runner", "namespace": NAMESPACE}
    ]
    for name in DEFAULT_RUNNERS:
        runner_pod, _ = with_rbac.heddle_containers()[name]
        assert runner_pod["automountServiceAccountToken"] is True
    for component in CONTROL_PLANE:
        pod, _ = with_rbac.heddle_containers()[component]
        assert pod["automountServiceAccountToken"] is False, component


# --- the chart: NATS users and passwords ---------------------------------------------------------


def authorization(manifest: Manifest, prefix: str = "") -> list[dict[str, Any]]:
    """The users of the server configuration the chart gives NATS (`authorization: {json}`)."""
    text = manifest.secret_data(prefix + AUTH_SECRET)["auth.conf"]
    key, _, value = text.partition(":")
    assert key == "authorization", text[:80]
    config = json.loads(value)
    assert set(config) == {"users"}, set(config)  # no no_auth_user, token or default user
    return config["users"]


@pytest.mark.parametrize(
    ("values", "runners"),
    [
        ({}, DEFAULT_RUNNERS),
        ({"runners": {"replicas": 5}}, tuple(f"runner-{i}" for i in range(5))),
        ({"namePrefix": "blue-", "runners": {"replicas": 1}}, ("blue-runner-0",)),
        ({"runners": {"replicas": 0}}, ()),
    ],
)
def test_nats_users_are_exactly_nats_permissions(
    chart: helm.Chart, values: dict, runners: tuple[str, ...]
) -> None:
    """templates/_nats.tpl copies shared/nats_permissions.py: any drift fails here."""
    manifest = render(chart, values)
    prefix = values.get("namePrefix", "")
    users = authorization(manifest, prefix)
    expected = {*perms.SERVICES, perms.INSPECTOR, *map(perms.runner_user, runners)}
    assert [u["user"] for u in users] == sorted(expected)
    passwords = manifest.secret_data(prefix + USERS_SECRET)
    assert set(passwords) == expected
    for entry in users:
        user = entry["user"]
        assert set(entry) == {"user", "password", "permissions"}, user
        assert entry["permissions"] == perms.permissions_for(user).to_config(), user
        # The server's configuration and the Secret the pods read agree, and are strong.
        assert entry["password"] == passwords[user], user
        assert len(passwords[user]) >= 32 and passwords[user].isalnum(), user
    assert len({u["password"] for u in users}) == len(users)


def test_nats_runs_with_the_users_and_no_anonymous_access(default: Manifest) -> None:
    sts = default.get("StatefulSet", "nats")
    pod = sts["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    (config,) = [a.split("=", 1)[1] for a in server["args"] if a.startswith("--config=")]
    (mount,) = [m for m in server["volumeMounts"] if m["mountPath"] == str(Path(config).parent)]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == AUTH_SECRET
    assert Path(config).name in default.secret_data(AUTH_SECRET)
    for flag in ("--user", "--pass", "--auth", "--no_auth_user"):
        assert not [a for a in server["args"] if a.startswith(flag)], flag
    # A change of users (runners added, passwords rotated) restarts NATS to load them.
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/auth"])


def secret_refs(pod: dict[str, Any]) -> set[tuple[str, str]]:
    """Every (Secret, key) a pod can read; key "*" when it gets the whole Secret."""
    refs: set[tuple[str, str]] = set()
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        for source in c.get("envFrom", []):
            if "secretRef" in source:
                refs.add((source["secretRef"]["name"], "*"))
        for entry in c.get("env", []):
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs.add((ref["name"], ref["key"]))
    for volume in pod.get("volumes", []):
        sources = [volume] if "secret" in volume else []
        sources += volume.get("projected", {}).get("sources", [])
        for source in sources:
            secret = source.get("secret")
            if secret is None:
                continue
            name = secret.get("secretName") or secret.get("name")
            items = secret.get("items")
            refs.update((name, i["key"]) for i in items) if items else refs.add((name, "*"))
    return refs


@pytest.mark.parametrize("values", [{}, {"runners": {"replicas": 5}, "settingsSecret": "extra"}])
def test_each_workload_has_its_own_user_and_password(chart: helm.Chart, values: dict) -> None:
    manifest = render(chart, values)
    seen = set()
    for key, (pod, container) in manifest.heddle_containers().items():
        env = manifest.env(container)
        user = env["HEDDLE_NATS_USER"]
        assert user == (perms.runner_user(key) if key.startswith("runner-") else key), key
        seen.add(user)
        # Of the passwords Secret, this pod can read its own key and nothing else.
        refs = {r for r in secret_refs(pod) if r[0] == USERS_SECRET}
        assert refs == {(USERS_SECRET, user)}, key
        if key.startswith("runner-"):
            # In its environment, which the runner strips from its steps (it is non-dumpable).
            assert env["HEDDLE_NATS_PASSWORD"] == {
                "secretKeyRef": {"name": USERS_SECRET, "key": user}
            }
            assert "HEDDLE_NATS_PASSWORD_FILE" not in env
        else:
            # In a file of its own: the control plane runs no one else's code.
            assert "HEDDLE_NATS_PASSWORD" not in env
            path = Path(env["HEDDLE_NATS_PASSWORD_FILE"])
            (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
            assert mount["readOnly"] is True
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            assert volume["secret"]["items"] == [{"key": user, "path": path.name}]
        annotations = manifest.workloads_by_key()[key]["spec"]["template"]["metadata"]
        assert re.fullmatch(r"[0-9a-f]{64}", annotations["annotations"]["checksum/nats-password"])
    assert len(seen) == len(manifest.heddle_containers())


def test_no_runner_can_reference_another_runners_password(chart: helm.Chart) -> None:
    manifest = render(chart, {"runners": {"replicas": 5}})
    runners = manifest.runner_workloads()
    assert len(runners) == 5
    all_runner_keys = {perms.runner_user(name) for name in runners}
    for name, workload in runners.items():
        pod = workload["spec"]["template"]["spec"]
        keys = {key for secret, key in secret_refs(pod) if secret == USERS_SECRET}
        assert keys == {perms.runner_user(name)}, name
        assert not keys & (all_runner_keys - {perms.runner_user(name)}), name
        assert (USERS_SECRET, "*") not in secret_refs(pod), name
        assert (ADMIN_SECRET, "token") not in secret_refs(pod), name
    # Nor does any other workload, NATS included, reach a runner's password.
    for w in manifest.workloads():
        if w["metadata"]["name"] in runners:
            continue
        keys = {k for s, k in secret_refs(w["spec"]["template"]["spec"]) if s == USERS_SECRET}
        assert not keys & all_runner_keys, w["metadata"]["name"]


@pytest.mark.parametrize(("step_user", "expected"), [(None, "65534"), ("nobody", "nobody")])
def test_runner_is_root_only_to_drop_to_the_step_user(
    chart: helm.Chart, step_user: str | None, expected: str
) -> None:
    values = {"runners": {"stepUser": step_user}} if step_user else {}
    manifest = render(chart, values)
    for name in DEFAULT_RUNNERS:
        pod, container = manifest.heddle_containers()[name]
        sc = container["securityContext"]
        assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False, name
        assert sc["allowPrivilegeEscalation"] is False, name
        assert sc["capabilities"]["drop"] == ["ALL"], name
        assert sorted(sc["capabilities"]["add"]) == ["KILL", "SETGID", "SETUID"], name
        assert not sc.get("privileged"), name
        assert pod["automountServiceAccountToken"] is False, name
        env = manifest.env(container)
        assert env["HEDDLE_STEP_USER"] == expected, name
        assert Settings.from_env(only_strings(env)).step_user == expected


def test_admin_token_is_generated_for_the_gateway_alone(default: Manifest) -> None:
    secret = default.get("Secret", ADMIN_SECRET)
    # Outlives `helm uninstall`: its hash stays in NATS's volume, and a reinstall must match it.
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    token = default.secret_data(ADMIN_SECRET)["token"]
    assert re.fullmatch(r"hdl_[A-Za-z0-9]{40,}", token), token
    readers = {
        key
        for key, (pod, _) in default.heddle_containers().items()
        if any(s == ADMIN_SECRET for s, _ in secret_refs(pod))
    }
    assert readers == {"gateway"}
    nats_pod = default.get("StatefulSet", "nats")["spec"]["template"]["spec"]
    assert not any(s == ADMIN_SECRET for s, _ in secret_refs(nats_pod))
    pod, gateway = default.heddle_containers()["gateway"]
    path = Path(default.env(gateway)["HEDDLE_ADMIN_TOKEN_FILE"])
    (mount,) = [m for m in gateway["volumeMounts"] if m["mountPath"] == str(path.parent)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"] == {
        "secretName": ADMIN_SECRET,
        "defaultMode": 0o440,
        "items": [{"key": "token", "path": path.name}],
    }
    # NOTES.txt tells how to read it and use it, and how to get the inspector's password.
    notes = default.notes
    assert (
        f"kubectl -n {NAMESPACE} get secret {ADMIN_SECRET} -o jsonpath='{{.data.token}}' "
        "| base64 -d" in notes
    )
    assert 'curl -H "Authorization: Bearer $TOKEN"' in notes
    assert f"get secret {USERS_SECRET} -o jsonpath='{{.data.inspector}}' | base64 -d" in notes
    assert "--user inspector" in notes


@pytest.mark.parametrize(
    ("values", "service"),
    [
        ({}, "gateway"),
        (
            {"namePrefix": "blue-", "gateway": {"allowedHosts": ["heddle.example.com"]}},
            "blue-gateway",
        ),
    ],
)
def test_gateway_answers_its_service_names(chart: helm.Chart, values: dict, service: str) -> None:
    manifest = render(chart, values)
    _, gateway = manifest.heddle_containers()["gateway"]
    hosts_text = manifest.env(gateway)["HEDDLE_ALLOWED_HOSTS"]
    hosts = AllowedHosts(hosts_text, "0.0.0.0")
    for name in (
        service,
        f"{service}.{NAMESPACE}.svc",
        f"{service}.{NAMESPACE}.svc.cluster.local",
        "127.0.0.1",
        "localhost",
        "[::1]",
    ):
        assert hosts.allows(f"{name}:8080"), name
    # <svc>.<namespace> is left out: a namespace may be a top-level domain.
    assert not hosts.allows(f"{service}.{NAMESPACE}")
    assert not hosts.allows("rebound.example")
    extra = values.get("gateway", {}).get("allowedHosts", [])
    assert all(hosts.allows(h) for h in extra)
    assert hosts.allows("heddle.example.com") == bool(extra)


# --- the chart: network policies ------------------------------------------------------------------


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector applied to a pod's labels."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions", []):
        has, value = e["key"] in labels, labels.get(e["key"])
        ok = {
            "In": has and value in e.get("values", []),
            "NotIn": not has or value not in e.get("values", []),
            "Exists": has,
            "DoesNotExist": not has,
        }[e["operator"]]
        if not ok:
            return False
    return True


def pods_selected(manifest: Manifest, selector: dict[str, Any]) -> set[str]:
    return {
        w["metadata"]["name"]
        for w in manifest.workloads()
        if selects(selector, w["spec"]["template"]["metadata"]["labels"])
    }


def policy_for(manifest: Manifest, workload: str) -> dict[str, Any]:
    (policy,) = [
        p
        for p in manifest.of_kind("NetworkPolicy").values()
        if workload in pods_selected(manifest, p["spec"]["podSelector"])
    ]
    return policy["spec"]


def test_only_heddle_pods_reach_nats(chart: helm.Chart, default: Manifest) -> None:
    heddle = {w["metadata"]["name"] for w in default.workloads()} - {"nats"}
    spec = policy_for(default, "nats")
    assert pods_selected(default, spec["podSelector"]) == {"nats"}
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]  # the monitoring port: no one by default
    assert rule["ports"] == [{"protocol": "TCP", "port": 4222}]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # this namespace's pods, no namespaceSelector
    assert pods_selected(default, peer["podSelector"]) == heddle
    # Not any pod that merely calls itself a gateway: the release's own labels.
    selector = peer["podSelector"]
    assert not selects(selector, {"app.kubernetes.io/component": "gateway"})
    assert not selects(
        selector,
        {
            "app.kubernetes.io/name": "heddle",
            "app.kubernetes.io/instance": "other",
            "app.kubernetes.io/component": "gateway",
        },
    )

    monitoring = [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}]
    opened = render(chart, {"nats": {"networkPolicy": {"monitorFrom": monitoring}}})
    rules = policy_for(opened, "nats")["ingress"]
    assert {"from": monitoring, "ports": [{"protocol": "TCP", "port": 8222}]} in rules
    assert not render(chart, {"networkPolicy": {"enabled": False}}).of_kind("NetworkPolicy")


def egress_is_nats_and_dns(spec: dict[str, Any], manifest: Manifest) -> list[dict[str, Any]]:
    """Check the first two egress rules are NATS's client port and DNS; the rest."""
    nats_rule, dns_rule, *rest = spec["egress"]
    assert nats_rule["ports"] == [{"protocol": "TCP", "port": 4222}]
    (peer,) = nats_rule["to"]
    assert pods_selected(manifest, peer["podSelector"]) == {"nats"}
    assert dns_rule == {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    return rest


def test_gateway_policy_follows_its_value(chart: helm.Chart, default: Manifest) -> None:
    spec = policy_for(default, "gateway")
    assert pods_selected(default, spec["podSelector"]) == {"gateway"}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert rule["from"] == [{"podSelector": {}}]  # default: pods of the release's namespace
    assert egress_is_nats_and_dns(spec, default) == []

    ingress = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}}]
    custom = render(chart, {"gateway": {"networkPolicy": {"from": ingress}}})
    (rule,) = policy_for(custom, "gateway")["ingress"]
    assert rule["from"] == ingress
    anywhere = render(chart, {"gateway": {"networkPolicy": {"from": []}}})
    (rule,) = policy_for(anywhere, "gateway")["ingress"]
    assert "from" not in rule  # the port, from any source


def test_runners_and_control_plane_reach_only_nats_and_dns(
    chart: helm.Chart, default: Manifest
) -> None:
    for name in ("orchestrator", "dispatcher", *DEFAULT_RUNNERS):
        spec = policy_for(default, name)
        assert spec["policyTypes"] == ["Ingress", "Egress"], name
        assert not spec.get("ingress"), name  # they serve nothing
        assert egress_is_nats_and_dns(spec, default) == [], name
        assert "nats" not in pods_selected(default, spec["podSelector"])
    # Steps that need more network get it from a value.
    more = [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 443}]}]
    opened = render(chart, {"runners": {"networkPolicy": {"egress": more}}})
    assert egress_is_nats_and_dns(policy_for(opened, "runner-0"), opened) == more
    assert egress_is_nats_and_dns(policy_for(opened, "orchestrator"), opened) == []


@pytest.mark.parametrize(
    "values",
    [
        {"runners": {"stepUser": "root"}},
        {"runners": {"stepUser": 0}},
        {"runners": {"stepUser": "0"}},
        {"runners": {"stepUser": "no body"}},
        {"networkPolicy": {"enabled": "yes"}},
        {"networkPolicy": {"dnsTo": {"namespaceSelector": {}}}},
        {"gateway": {"networkPolicy": {"from": "everyone"}}},
        {"gateway": {"networkPolicy": {"form": []}}},
        {"gateway": {"allowedHosts": ["heddle.example.com:443"]}},
        {"gateway": {"allowedHosts": "heddle.example.com"}},
        {"nats": {"networkPolicy": {"monitorFrom": {}}}},
        {"runners": {"networkPolicy": {"egress": "all"}}},
        {"runners": {"podManagementPolicy": "Parallel"}},  # gone: one StatefulSet per runner
        {"settings": {"auth": "basic"}},
        {"settings": {"natsUser": "admin"}},  # the chart sets each container's own
    ],
)
def test_values_schema_rejects_bad_security_values(chart: helm.Chart, values: dict) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(chart, values)


# --- the chart's authorization on a real nats-server ----------------------------------------------


async def raw_connect(port: int, credentials: dict[str, str]) -> bytes:
    """The server's answer to a CONNECT with these credentials, over a plain socket."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        assert (await reader.readline()).startswith(b"INFO ")
        connect = json.dumps({"verbose": False, "pedantic": False, **credentials})
        writer.write(f"CONNECT {connect}\r\nPING\r\n".encode())
        await writer.drain()
        return (await asyncio.wait_for(reader.readline(), 5)).strip()
    finally:
        writer.close()
        await writer.wait_closed()


@contextlib.contextmanager
def chart_nats_server(manifest: Manifest, tmp_path: Path) -> Iterator[int]:
    """nats-server started with the rendered NATS container's own arguments, its Secret
    volumes written out where they are mounted; yields the client port."""
    pod = manifest.get("StatefulSet", "nats")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    paths = {}
    for mount in container["volumeMounts"]:
        local = tmp_path / mount["name"]
        local.mkdir()
        secret = volumes.get(mount["name"], {}).get("secret")
        for key, value in manifest.secret_data(secret["secretName"]).items() if secret else ():
            (local / key).write_text(value)
        paths[mount["mountPath"]] = str(local)
    port, monitor = free_port(), free_port()
    args = []
    for arg in container["args"]:
        for mount_path, local in paths.items():
            arg = arg.replace(f"={mount_path}", f"={local}")
        arg = re.sub(r"^--port=\d+$", f"--port={port}", arg)
        arg = re.sub(r"^--http_port=\d+$", f"--http_port={monitor}", arg)
        args.append(arg.replace("$(POD_NAME)", "nats-0"))
    assert any(a.startswith(f"--config={tmp_path}") for a in args), args
    log = open(tmp_path / "nats.log", "wb")
    proc = subprocess.Popen([find_binary(), "--addr=127.0.0.1", *args], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 15
        while not port_open(port):
            assert proc.poll() is None, (tmp_path / "nats.log").read_text()
            assert time.monotonic() < deadline, "nats-server did not listen"
            time.sleep(0.02)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


async def test_the_charts_users_work_on_a_real_nats_server(
    chart: helm.Chart, tmp_path: Path
) -> None:
    """NATS started as the chart starts it (its arguments, its auth.conf), and the passwords the
    chart gives the pods."""
    manifest = render(chart)
    passwords = manifest.secret_data(USERS_SECRET)
    with chart_nats_server(manifest, tmp_path) as port:
        url = f"nats://127.0.0.1:{port}"
        # The gateway connects as the services do and keeps every stream and bucket.
        gateway = Settings(nats_url=url, nats_user="gateway", nats_password=passwords["gateway"])
        nc = await connect(gateway, "test-gateway")
        try:
            await ensure_resources(nc, gateway)
        finally:
            await nc.close()

        # A runner reaches what it needs and is refused the run state.
        runner = perms.runner_user("runner-0")
        errors: list[str] = []

        async def error_cb(exc: Exception) -> None:
            errors.append(str(exc))

        nc = await nats.connect(
            url,
            user=runner,
            password=passwords[runner],
            inbox_prefix=perms.inbox_prefix(runner),
            error_cb=error_cb,
            allow_reconnect=False,
        )
        try:
            settings = Settings(nats_url=url)
            await ensure_resources(
                nc,
                settings,
                streams=(names.EVENTS_STREAM, names.LOGS_STREAM),
                buckets=(names.HEARTBEATS_BUCKET, names.RUNNERS_BUCKET),
                create=False,
            )
            await nc.jetstream().publish(names.kv_subject(names.RUNNERS_BUCKET, "runner-0"), b"{}")
            assert errors == []
            await nc.publish(names.kv_subject(names.RUNS_BUCKET, "x"), b"{}")
            await nc.flush()
            deadline = asyncio.get_running_loop().time() + 5
            while not any("permissions violation" in e for e in errors):
                assert asyncio.get_running_loop().time() < deadline, errors
                await asyncio.sleep(0.02)
        finally:
            await nc.close()

        # No anonymous client, and no runner with another runner's password.
        other = passwords[perms.runner_user("runner-1")]
        for credentials in ({}, {"user": runner, "pass": other}):
            answer = await raw_connect(port, credentials)
            assert answer == b"-ERR 'Authorization Violation'", credentials


def test_lint_passes_strict() -> None:
    for values in (None, {"runners": {"replicas": 5}}, VALUE_SETS["everything-set"]):
        report = helm.lint(CHART_DIR, values, strict=True, kube_version="v" + KUBE_VERSION)
        assert report["total_charts_linted"] == 1
        assert report["errors"] == [], report
        problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error
        assert problems == [], problems


def test_lint_reports_bad_values() -> None:
    report = helm.lint(
        CHART_DIR, {"runners": {"replicas": -1}}, strict=True, kube_version="v" + KUBE_VERSION
    )
    assert report["errors"], report


# --- docker-compose.yml --------------------------------------------------------------------------


def test_compose_file_matches_the_compose_spec() -> None:
    checker = Path(sys.executable).parent / "check-jsonschema"
    assert checker.exists(), f"{checker} missing: pip install -e '.[dev]'"
    result = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


COMPOSE_RUNNERS = ("runner-0", "runner-1")
COMPOSE_HEDDLE = (*CONTROL_PLANE, *COMPOSE_RUNNERS)


def test_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"nats", "nats-users", *COMPOSE_HEDDLE}
    builds = {name: services[name].get("build") for name in (*COMPOSE_HEDDLE, "nats-users")}
    assert set(map(json.dumps, builds.values())) == {json.dumps(".")}, builds
    assert len({services[name].get("image") for name in (*COMPOSE_HEDDLE, "nats-users")}) == 1
    for name in COMPOSE_HEDDLE:
        svc = services[name]
        command = "runner" if name in COMPOSE_RUNNERS else name
        assert svc["command"] == ["heddle", command], name
        assert svc["environment"]["HEDDLE_NATS_URL"] == "nats://nats:4222", name
        assert svc["depends_on"]["nats"]["condition"] == "service_healthy", name
        assert parse_duration(svc["stop_grace_period"]) > SETTING_DEFAULTS["shutdown_grace"], name
        assert "no-new-privileges:true" in svc["security_opt"], name
    for name in COMPOSE_RUNNERS:
        runner = services[name]
        assert parse_duration(runner["stop_grace_period"]) > (
            SETTING_DEFAULTS["shutdown_grace"] + SETTING_DEFAULTS["kill_grace"] + 5
        )
        # A runner is one NATS user: a fixed name, never `--scale`d into two of the same.
        assert runner["environment"]["HEDDLE_RUNNER_NAME"] == name
        assert "ports" not in runner
    for name in CONTROL_PLANE:
        assert services[name]["cap_drop"] == ["ALL"], name
        assert "user" not in services[name], name  # the image's uid 10001
    assert services["gateway"]["environment"]["HEDDLE_GATEWAY_HOST"] == "0.0.0.0"
    assert [p.rsplit(":", 1)[-1] for p in services["gateway"]["ports"]] == ["8080"]

    nats = services["nats"]
    assert "build" not in nats
    image, tag = nats["image"].split(":")
    assert image == "nats"
    assert tuple(int(n) for n in re.match(r"(\d+)\.(\d+)", tag).groups()) >= (2, 14)
    assert "--jetstream" in nats["command"]
    assert "--store_dir=/data" in nats["command"]
    assert mounts(nats)["/data"][0] in compose["volumes"]
    assert nats["depends_on"]["nats-users"]["condition"] == "service_completed_successfully"


def mounts(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """{target: (volume, read only)} of a service's short-syntax volume mounts."""
    out = {}
    for entry in service.get("volumes", []):
        source, target, *mode = entry.split(":")
        out[target] = (source, mode == ["ro"])
    return out


def init_args(compose: dict[str, Any]) -> dict[str, str]:
    """The nats-users service's --flag=value arguments."""
    command = compose["services"]["nats-users"]["command"]
    assert command[:2] == ["heddle", "nats-users"], command
    return dict(arg.removeprefix("--").split("=", 1) for arg in command[2:])


def test_compose_init_service_writes_the_users(compose: dict[str, Any]) -> None:
    init = compose["services"]["nats-users"]
    assert init["restart"] == "no"
    assert init["network_mode"] == "none"  # it makes files, it talks to nobody
    args = init_args(compose)
    assert int(args["runners"]) == len(COMPOSE_RUNNERS)
    # Runners start as root with no DAC_OVERRIDE: their files must be root's; the rest the
    # image's user's.
    assert args["owner"] == "10001:10001"
    assert args["runner-owner"] == "0:0"
    # It parses as the real command line does.
    from services.cli import parser

    parsed = parser().parse_args(init["command"][1:])
    assert (parsed.command, parsed.runners, parsed.dir) == ("nats-users", 2, args["dir"])
    for volume in {v for v, _ in mounts(init).values()}:
        assert volume in compose["volumes"], volume


def test_compose_services_get_their_own_user_and_password_file(compose: dict[str, Any]) -> None:
    services = compose["services"]
    out_dir = init_args(compose)["dir"]
    init_mounts = {target: volume for target, (volume, _) in mounts(services["nats-users"]).items()}
    users = set()
    for name in COMPOSE_HEDDLE:
        env = services[name]["environment"]
        user = env["HEDDLE_NATS_USER"]
        expected = perms.runner_user(name) if name in COMPOSE_RUNNERS else name
        assert user == expected, name
        users.add(user)
        # The password file lies in a volume that nats-users fills with this user's directory
        # (DIR/<user>/password), mounted read-only, and the service mounts no other secrets.
        password_file = Path(env["HEDDLE_NATS_PASSWORD_FILE"])
        assert password_file.name == "password", name
        own = mounts(services[name])
        volume, read_only = own[str(password_file.parent)]
        assert read_only, name
        assert init_mounts[f"{out_dir}/{user}"] == volume, name
        assert set(own) == {str(password_file.parent)}, name
        assert "HEDDLE_NATS_PASSWORD" not in env, name  # not in `docker inspect`
    assert len(users) == len(COMPOSE_HEDDLE)
    # No two services share a secrets volume.
    volumes = [v for name in COMPOSE_HEDDLE for v, _ in mounts(services[name]).values()]
    assert len(volumes) == len(set(volumes))

    gateway = services["gateway"]["environment"]
    token = Path(gateway["HEDDLE_ADMIN_TOKEN_FILE"])
    assert token.parent == Path(gateway["HEDDLE_NATS_PASSWORD_FILE"]).parent
    assert token.name == "admin-token"
    for name in COMPOSE_HEDDLE:
        if name != "gateway":
            assert "HEDDLE_ADMIN_TOKEN_FILE" not in services[name]["environment"], name
    hosts = AllowedHosts(
        re.sub(r"\$\{HEDDLE_ALLOWED_HOSTS:-(.*)\}", r"\1", gateway["HEDDLE_ALLOWED_HOSTS"])
    )
    assert hosts.allows("127.0.0.1:8080") and hosts.allows("localhost:8080")
    assert not hosts.allows("rebound.example")


def test_compose_nats_loads_the_users(compose: dict[str, Any]) -> None:
    services = compose["services"]
    nats = services["nats"]
    (config,) = [a.split("=", 1)[1] for a in nats["command"] if a.startswith("--config=")]
    config = Path(config)
    volume, read_only = mounts(nats)[str(config.parent)]
    assert read_only
    init_mounts = {target: volume for target, (volume, _) in mounts(services["nats-users"]).items()}
    assert init_mounts[init_args(compose)["dir"]] == volume
    assert config.name == "nats-auth.conf"  # what services/nats_users.py writes
    # No flag that would let a client in without a user.
    assert not [a for a in nats["command"] if a.startswith(("--user", "--pass", "--auth"))]


def test_compose_runners_start_as_root_to_drop_to_the_step_user(compose: dict[str, Any]) -> None:
    for name in COMPOSE_RUNNERS:
        runner = compose["services"][name]
        assert runner["user"] == "0:0", name
        assert runner["cap_drop"] == ["ALL"], name
        assert sorted(runner["cap_add"]) == ["KILL", "SETGID", "SETUID"], name
        assert "privileged" not in runner, name
        step_user = runner["environment"]["HEDDLE_STEP_USER"]
        assert re.sub(r"\$\{HEDDLE_STEP_USER:-(.*)\}", r"\1", step_user) == "65534", name


def parse_duration(text: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    assert parts and "".join(n + u for n, u in parts) == text, text
    return sum(float(n) * units[u] for n, u in parts)


# --- Dockerfile, .dockerignore, the kind script --------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        current += " " + stripped.removesuffix("\\").strip()
        if not stripped.endswith("\\"):
            logical.append(current.strip())
            current = ""
    assert not current, "Dockerfile ends in a continuation line"
    out = []
    for text in logical:
        instruction, _, args = text.partition(" ")
        out.append((instruction.upper(), args.strip()))
    return out


def test_dockerfile() -> None:
    instructions = dockerfile_instructions()
    froms = [args for ins, args in instructions if ins == "FROM"]
    assert froms, "no FROM"
    for args in froms:
        assert args.split()[0].startswith("python:3.11"), args
    final_stage = instructions[max(i for i, (ins, _) in enumerate(instructions) if ins == "FROM") :]
    users = [args for ins, args in final_stage if ins == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users[-1]
    runs = " ".join(args for ins, args in instructions if ins == "RUN")
    assert re.search(r"pip install (--\S+ )*\.(\s|$|\[)", runs), runs
    assert "tini" in runs

    by_name = {ins: args for ins, args in final_stage}
    entrypoint = json.loads(by_name["ENTRYPOINT"])  # exec form is JSON
    cmd = json.loads(by_name["CMD"])
    assert isinstance(entrypoint, list) and isinstance(cmd, list)
    assert Path(entrypoint[0]).name == "tini"
    assert cmd == ["heddle", "gateway"]
    # The build copies what `pip install .` needs, and .dockerignore lets all of it through.
    copied = set()
    for ins, args in instructions:
        if ins == "COPY" and "--from" not in args:
            copied.update(p.rstrip("/") for p in shlex.split(args)[:-1])
    assert {"pyproject.toml", "README.md", "shared", "services"} <= copied
    ignore = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert copied <= allowed, copied - allowed
    assert not {".venv", ".git"} & allowed


def test_kind_script() -> None:
    assert os.access(KIND_UP, os.X_OK), f"{KIND_UP} is not executable"
    result = subprocess.run(
        ["bash", "-n", str(KIND_UP)], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    script = KIND_UP.read_text()
    for needed in (
        "set -euo pipefail",
        "kind create cluster",
        "docker build",
        "kind load docker-image",
        "helm upgrade --install",
        "deploy/helm/heddle",
        "runners.replicas",
    ):
        assert needed in script, needed


def test_an_installed_package_carries_the_web_page(tmp_path: Path) -> None:
    """The image installs Heddle as a wheel (not editable): the page's files must be in it."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((ROOT / name).read_bytes())
    for package in ("services", "shared"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = out.glob("heddle-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    shipped = {
        f"services/gateway/static/{p.name}" for p in (ROOT / "services/gateway/static").iterdir()
    }
    assert shipped and shipped <= names
    assert "services/gateway/web.py" in names
