"""The deployment files: the Helm chart, docker-compose.yml, the Dockerfile and the kind script.

All offline, with no docker engine, cluster or helm binary: helm-python-sdk renders and lints
the chart with Helm's own Go code, kubernetes-validate checks every rendered object against the
Kubernetes 1.30 OpenAPI schemas, and check-jsonschema checks docker-compose.yml against the
Compose Specification.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

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
HEDDLE_SERVICES = (*CONTROL_PLANE, "runner")
# Settings the chart must not take from values: the runner's name is its pod's name.
NOT_CHART_SETTINGS = {"runner_name", "pod_name", "node_name"}
SETTING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Settings)}


# --- rendering ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Manifest:
    """One render of the chart, parsed."""

    objects: list[dict[str, Any]]

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
        """{component: (pod spec, container)} for the four Heddle services."""
        out = {}
        for w in self.workloads():
            component = w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
            if component == "nats":
                continue
            pod = w["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            out[component] = (pod, container)
        return out

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
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml")):  # NOTES.txt
            continue
        for doc in yaml.safe_load_all(text):
            if doc is None:
                continue
            assert isinstance(doc, dict), f"{path}: not a mapping: {doc!r}"
            for key in ("apiVersion", "kind", "metadata"):
                assert key in doc, f"{path}: object without {key}"
            objects.append(doc)
    return Manifest(objects)


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
        "runners": {"replicas": 3, "podManagementPolicy": "OrderedReady"},
        "nats": {"persistence": {"enabled": False}, "extraArgs": ["--max_payload", "8MB"]},
    },
    "external-nats-no-rbac": {
        "nats": {"enabled": False},
        "settings": {"natsUrl": "nats://nats.example:4222"},
        "rbac": {"create": False},
        "serviceAccount": {"create": False},
    },
}


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_rendered_object_is_valid_kubernetes(chart: helm.Chart, values: dict) -> None:
    manifest = render(chart, values)
    assert len(manifest.of_kind("Deployment")) == 3
    assert "runner" in {o["metadata"]["name"].removeprefix("blue-") for o in manifest.workloads()}
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
    assert set(statefulsets) == {"runner", "nats"}
    runner = statefulsets["runner"]
    assert runner["spec"]["replicas"] == 2
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
    # Every Service selects the pods of exactly one workload.
    for svc in services.values():
        selector = svc["spec"]["selector"]
        matched = [
            w["metadata"]["name"]
            for w in default.workloads()
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matched) == 1, (svc["metadata"]["name"], matched)
    assert set(default.of_kind("ServiceAccount")) == {"heddle", "heddle-runner"}
    assert set(default.of_kind("ConfigMap")) == {"heddle-settings"}


def default_app_version() -> str:
    return yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"]


@pytest.mark.parametrize("replicas", [1, 5])
def test_runner_replicas_value_is_honoured(chart: helm.Chart, replicas: int) -> None:
    manifest = render(chart, {"runners": {"replicas": replicas}})
    runner = manifest.get("StatefulSet", "runner")
    assert runner["spec"]["replicas"] == replicas
    assert runner["spec"]["podManagementPolicy"] == "Parallel"
    # The other workloads do not follow it.
    assert manifest.get("StatefulSet", "nats")["spec"]["replicas"] == 1
    for d in manifest.of_kind("Deployment").values():
        assert d["spec"]["replicas"] == 1


def test_runner_name_and_node_come_from_the_downward_api(default: Manifest) -> None:
    containers = default.heddle_containers()
    assert set(containers) == set(HEDDLE_SERVICES)
    for component, (_, container) in containers.items():
        env = default.env(container)
        assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}, component
        assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, component
        # Nothing overrides the runner's name: it is its pod's name, runner-0 ... runner-N.
        assert "HEDDLE_RUNNER_NAME" not in env, component


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
    assert nats["template"]["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]


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
    assert set(manifest.of_kind("StatefulSet")) == {"blue-runner", "blue-nats"}
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
    assert set(containers) == set(HEDDLE_SERVICES)
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
        expected = "debug" if component == "runner" else "info"
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
        if component == "runner":  # the step's kill, then up to 5 s for it to exit
            needed += grace(env, "HEDDLE_KILL_GRACE", "kill_grace") + 5
        assert pod["terminationGracePeriodSeconds"] > needed, (component, needed)


def test_termination_grace_exceeds_the_shutdown_grace(chart: helm.Chart, default: Manifest) -> None:
    assert_grace_periods_fit(default)
    tgps = {
        c: p["terminationGracePeriodSeconds"] for c, (p, _) in default.heddle_containers().items()
    }
    assert tgps == {"gateway": 20, "orchestrator": 20, "dispatcher": 20, "runner": 30}
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
        longer.get("StatefulSet", "runner")["spec"]["template"]["spec"][
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
    _, runner = manifest.heddle_containers()["runner"]
    assert runner["resources"] == custom


def test_pods_run_as_non_root_without_privileges(default: Manifest) -> None:
    for w in default.workloads():
        pod = w["spec"]["template"]["spec"]
        name = w["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 10001, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], name
    for component in (*CONTROL_PLANE, "nats"):
        w = next(x for x in default.workloads() if x["metadata"]["name"] == component)
        (c,) = w["spec"]["template"]["spec"]["containers"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True, component


def test_rbac_is_minimal(chart: helm.Chart, default: Manifest) -> None:
    assert not default.of_kind("ClusterRole")
    assert not default.of_kind("ClusterRoleBinding")
    (role,) = default.of_kind("Role").values()
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    (binding,) = default.of_kind("RoleBinding").values()
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "heddle-runner", "namespace": NAMESPACE}
    ]
    containers = default.heddle_containers()
    runner_pod, _ = containers["runner"]
    assert runner_pod["serviceAccountName"] == "heddle-runner"
    assert runner_pod["automountServiceAccountToken"] is True
    for component in CONTROL_PLANE:
        pod, _ = containers[component]
        assert pod["serviceAccountName"] == "heddle", component
        assert pod["automountServiceAccountToken"] is False, component
    nats_pod = default.get("StatefulSet", "nats")["spec"]["template"]["spec"]
    assert nats_pod["automountServiceAccountToken"] is False

    without = render(chart, {"rbac": {"create": False}})
    assert not without.of_kind("Role")
    assert not without.of_kind("RoleBinding")
    runner_pod, _ = without.heddle_containers()["runner"]
    assert runner_pod["automountServiceAccountToken"] is False


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


def test_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"nats", *HEDDLE_SERVICES}
    builds = {name: services[name].get("build") for name in HEDDLE_SERVICES}
    assert set(map(json.dumps, builds.values())) == {json.dumps(".")}, builds
    assert len({services[name].get("image") for name in HEDDLE_SERVICES}) == 1
    for name in HEDDLE_SERVICES:
        svc = services[name]
        assert svc["command"] == ["heddle", name], name
        assert svc["environment"]["HEDDLE_NATS_URL"] == "nats://nats:4222", name
        assert svc["depends_on"]["nats"]["condition"] == "service_healthy", name
        assert parse_duration(svc["stop_grace_period"]) > SETTING_DEFAULTS["shutdown_grace"], name
    runner = services["runner"]
    assert parse_duration(runner["stop_grace_period"]) > (
        SETTING_DEFAULTS["shutdown_grace"] + SETTING_DEFAULTS["kill_grace"] + 5
    )
    # `docker compose up --scale runner=4` needs no fixed name and no host port.
    for key in ("container_name", "ports", "hostname"):
        assert key not in runner, key
    assert services["gateway"]["environment"]["HEDDLE_GATEWAY_HOST"] == "0.0.0.0"
    assert [p.rsplit(":", 1)[-1] for p in services["gateway"]["ports"]] == ["8080"]

    nats = services["nats"]
    assert "build" not in nats
    image, tag = nats["image"].split(":")
    assert image == "nats"
    assert tuple(int(n) for n in re.match(r"(\d+)\.(\d+)", tag).groups()) >= (2, 14)
    assert "--jetstream" in nats["command"]
    assert "--store_dir=/data" in nats["command"]
    (volume,) = nats["volumes"]
    source, target = volume.split(":")
    assert target == "/data"
    assert source in compose["volumes"]


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
