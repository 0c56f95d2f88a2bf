"""The Helm chart: every object valid Kubernetes, the services and runners it runs, their
settings, probes, resources and grace periods, and Helm's lint. All offline, with no cluster
or helm binary: kubernetes-validate checks every rendered object against the Kubernetes 1.30
OpenAPI schemas. The chart's security is in test_deploy_security.py."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from heddle.shared.runtime.settings import Settings

from tests.support.chart_render import (
    CHART_DIR,
    CONTROL_PLANE,
    DEFAULT_RUNNERS,
    KUBE_VERSION,
    NAMESPACE,
    NOT_CHART_SETTINGS,
    SETTING_DEFAULTS,
    Manifest,
    nats_url_target,
    only_strings,
    render,
)

VALUE_SETS = {
    "defaults": {},
    "five-runners": {"runners": {"replicas": 5}},
    "three-dispatchers": {"dispatcher": {"replicas": 3}},
    "three-orchestrators": {"orchestrator": {"replicas": 3}},
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
        "podWatch": {
            "nodes": False,
            "apiServer": {"to": [{"ipBlock": {"cidr": "172.18.0.0/16"}}], "ports": [6443]},
        },
        "natsBox": {"enabled": True},
        "clusterDomain": "corp.internal",
        "networkPolicy": {"dnsTo": [{"namespaceSelector": {}}]},
        "metrics": {"networkPolicy": {"from": [{"namespaceSelector": {}}]}},
    },
    "external-nats-no-pod-watch": {
        "nats": {"enabled": False},
        "settings": {"natsUrl": "nats://nats.example:4222"},
        "podWatch": {"enabled": False},
        "serviceAccount": {"create": False},
        "networkPolicy": {
            "externalNats": {"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "port": 4223}
        },
    },
    "nats-cluster": {
        "nats": {"replicas": 3, "persistence": {"size": "4Gi"}},
        "gateway": {"replicas": 2},
        "runners": {"replicas": 4},
        "podDisruptionBudget": {"runnersMaxUnavailable": 2},
    },
    "no-pdb-small-volume": {
        "podDisruptionBudget": {"enabled": False},
        "nats": {"persistence": {"size": "1Gi"}},
        "settings": {"logMaxBytes": 536870912},
    },
    "no-network-policy": {"networkPolicy": {"enabled": False}},
    "no-metrics-port": {"settings": {"metricsPort": 0}, "metrics": {"annotations": False}},
    "autoscaling": {
        "runners": {"replicas": 2, "autoscaling": {"enabled": True, "maxReplicas": 5}},
    },
    "autoscaling-prefixed-own-accounts": {
        "namePrefix": "blue-",
        "serviceAccount": {"create": False, "dispatcherName": "scaler"},
        "runners": {
            "autoscaling": {
                "enabled": True,
                "minReplicas": 0,
                "maxReplicas": 3,
                "upAfterSeconds": 5,
                "idleAfterSeconds": 60.5,
            }
        },
        "networkPolicy": {"enabled": False},
    },
    "service-monitor": {
        "metrics": {
            "serviceMonitor": {
                "enabled": True,
                "interval": "15s",
                "scrapeTimeout": "10s",
                "labels": {"release": "prometheus"},
                "authorization": {
                    "type": "Bearer",
                    "credentials": {"name": "heddle-metrics-token", "key": "token"},
                },
            }
        }
    },
    "open-gateway-no-runners": {
        "gateway": {"networkPolicy": {"from": []}},
        "runners": {"replicas": 0},
    },
}


# The fields of the Prometheus Operator's ServiceMonitor (monitoring.coreos.com/v1) the chart
# writes, as its CRD defines them; anything else is refused, as strict validation would.
_DURATION = (
    "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _LABELS},
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                "endpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": _DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                            "authorization": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "type": {"type": "string"},
                                    "credentials": {
                                        "type": "object",
                                        "required": ["key"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "name": {"type": "string"},
                                            "key": {"type": "string"},
                                            "optional": {"type": "boolean"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_rendered_object_is_valid_kubernetes(chart: helm.Chart, values: dict) -> None:
    manifest = render(chart, values)
    deployments = set(manifest.of_kind("Deployment"))
    assert {"gateway", "orchestrator", "dispatcher"} <= {
        d.removeprefix("blue-") for d in deployments
    }
    assert len(deployments) == 3 + bool((values.get("natsBox") or {}).get("enabled"))
    runners = (values.get("runners") or {}).get("replicas", 2)
    scaling = (values.get("runners") or {}).get("autoscaling") or {}
    if scaling.get("enabled"):
        runners = scaling["maxReplicas"]  # every runner the pool may grow to
    assert len(manifest.runner_workloads()) == runners
    for obj in manifest.objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "ServiceMonitor":  # a CRD: kubernetes-validate has no schema of it
            jsonschema.validate(obj, SERVICE_MONITOR)
            kubernetes_validate.validate(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]},
                KUBE_VERSION,
                strict=True,
            )
            continue
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
    # Each rolls a new pod in before an old one leaves (tests/deploy/test_deploy_upgrades.py).
    for d in deployments.values():
        assert d["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}

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
    assert set(default.of_kind("ServiceAccount")) == {
        "heddle",
        "heddle-orchestrator",
        "heddle-runner",
    }
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
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
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
        f"values.schema.json settings drifted from shared/runtime/settings.py: "
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
    # A 4 GiB log stream needs a volume that holds it.
    manifest = render(chart, {"settings": overrides, "nats": {"persistence": {"size": "8Gi"}}})
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
    port, _ = gateway["ports"]  # and its metrics port (below)
    assert (port["name"], port["containerPort"]) == ("http", int(env["HEDDLE_GATEWAY_PORT"]))
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert gateway["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    svc_port = default.get("Service", "gateway")["spec"]["ports"][0]
    assert (svc_port["port"], svc_port["targetPort"]) == (8080, "http")


def test_every_service_is_probed_on_its_metrics_port(chart: helm.Chart, default: Manifest) -> None:
    # /healthz (live: the event loop answers) and /readyz (started, connected to NATS) are
    # served beside /metrics (shared/runtime/metrics_http.py; tests/fault/test_probes.py asks them).
    for key, (_, container) in default.heddle_containers().items():
        if key == "gateway":
            continue
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        env = Settings.from_env(only_strings(default.env(container)))
        assert ports["metrics"] == env.metrics_port, key
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        live = container["livenessProbe"]
        # A frozen service is restarted within periodSeconds x failureThreshold (+ timeout).
        assert live["periodSeconds"] * live["failureThreshold"] <= 30, key
    # No metrics port, nothing to probe: no probe that would always fail.
    none = render(chart, {"settings": {"metricsPort": 0}})
    for key, (_, container) in none.heddle_containers().items():
        if key != "gateway":
            assert not {"livenessProbe", "readinessProbe", "startupProbe"} & set(container), key


@pytest.mark.parametrize(
    ("size", "log_bytes", "fits"),
    [
        ("2Gi", None, True),  # the default volume holds the default 1 GiB log stream
        ("1Gi", None, False),  # the issue's crash loop: err_code=10047
        ("1Gi", 536870912, True),
        ("1536Mi", None, True),
        ("1500M", None, False),
        ("2G", None, True),
        ("10Gi", 7516192768, True),
        ("10Gi", 7516192769, False),
    ],
)
def test_the_nats_volume_must_hold_the_log_stream(
    chart: helm.Chart, size: str, log_bytes: int | None, fits: bool
) -> None:
    values: dict[str, Any] = {"nats": {"persistence": {"size": size}}}
    if log_bytes is not None:
        values["settings"] = {"logMaxBytes": log_bytes}
    if fits:
        manifest = render(chart, values)
        (claim,) = manifest.get("StatefulSet", "nats")["spec"]["volumeClaimTemplates"]
        assert claim["spec"]["resources"]["requests"]["storage"] == size
    else:
        with pytest.raises(helm.HelmRenderError, match="cannot hold the log stream"):
            render(chart, values)


def test_the_default_volume_fits_the_default_log_stream(default: Manifest) -> None:
    (claim,) = default.get("StatefulSet", "nats")["spec"]["volumeClaimTemplates"]
    size = claim["spec"]["resources"]["requests"]["storage"]
    assert size == "2Gi"
    _, container = default.heddle_containers()["orchestrator"]
    log_bytes = Settings.from_env(only_strings(default.env(container))).log_max_bytes
    # nats-server gives JetStream 75% of the volume; the log stream reserves its max_bytes.
    assert log_bytes <= 0.75 * 2 * 1024**3


def test_a_three_node_nats_cluster(chart: helm.Chart) -> None:
    manifest = render(chart, {"nats": {"replicas": 3}})
    nats = manifest.get("StatefulSet", "nats")
    assert nats["spec"]["replicas"] == 3
    assert nats["spec"]["podManagementPolicy"] == "Parallel"
    (container,) = nats["spec"]["template"]["spec"]["containers"]
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)
    headless = nats["spec"]["serviceName"]
    assert args["cluster"] == "nats://0.0.0.0:6222"
    assert args["cluster_name"] == "nats"
    assert args["routes"].split(",") == [
        f"nats://nats-{i}.{headless}:6222" for i in range(3)
    ]  # every pod's stable name under the headless Service, which publishes the route port
    ports = {p["name"]: p["port"] for p in manifest.get("Service", headless)["spec"]["ports"]}
    assert ports["cluster"] == 6222
    assert {p["name"] for p in container["ports"]} == {"client", "monitor", "cluster"}
    # Every stream and bucket on three nodes.
    for key, (_, c) in manifest.heddle_containers().items():
        assert Settings.from_env(only_strings(manifest.env(c))).replicas == 3, key
    # Only NATS pods reach the route port.
    policy = manifest.get("NetworkPolicy", "nats")
    (routes,) = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 6222]
    (peer,) = routes["from"]
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "nats"
    # A single node: no cluster, one replica of everything.
    single = render(chart)
    (container,) = single.get("StatefulSet", "nats")["spec"]["template"]["spec"]["containers"]
    assert not [a for a in container["args"] if a.startswith(("--cluster", "--routes"))]
    _, c = single.heddle_containers()["gateway"]
    assert Settings.from_env(only_strings(single.env(c))).replicas == 1
    # Settings.replicas beyond the nodes cannot be placed: refused.
    with pytest.raises(helm.HelmRenderError, match=r"must not exceed nats\.replicas"):
        render(chart, {"settings": {"replicas": 3}})
    render(chart, {"settings": {"replicas": 3}, "nats": {"replicas": 3}})
    with pytest.raises(helm.HelmValuesError):
        render(chart, {"nats": {"replicas": 2}})  # no quorum after a loss: not offered


def test_disruption_budgets(chart: helm.Chart, default: Manifest) -> None:
    def selected(manifest: Manifest, pdb: dict[str, Any]) -> set[str]:
        labels = pdb["spec"]["selector"]["matchLabels"]
        return {
            w["metadata"]["name"]
            for w in manifest.workloads()
            if labels.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        }

    # One gateway, one NATS node: no budget (it would block drains); two runners: one.
    assert set(default.of_kind("PodDisruptionBudget")) == {"runner"}
    runners = default.get("PodDisruptionBudget", "runner")
    assert selected(default, runners) == set(DEFAULT_RUNNERS)
    assert runners["spec"]["maxUnavailable"] == 1
    big = render(chart, VALUE_SETS["nats-cluster"])
    pdbs = big.of_kind("PodDisruptionBudget")
    assert set(pdbs) == {"gateway", "runner", "nats"}
    assert selected(big, pdbs["gateway"]) == {"gateway"}
    assert selected(big, pdbs["nats"]) == {"nats"}
    assert selected(big, pdbs["runner"]) == set(big.runner_workloads())
    assert pdbs["runner"]["spec"]["maxUnavailable"] == 2
    assert pdbs["gateway"]["spec"]["maxUnavailable"] == pdbs["nats"]["spec"]["maxUnavailable"] == 1
    assert not render(chart, {"podDisruptionBudget": {"enabled": False}}).of_kind(
        "PodDisruptionBudget"
    )


def test_every_service_serves_metrics_where_prometheus_looks(
    chart: helm.Chart, default: Manifest
) -> None:
    workloads = default.workloads_by_key()
    for key, (_, container) in default.heddle_containers().items():
        settings = Settings.from_env(only_strings(default.env(container)))
        assert (settings.metrics_host, settings.metrics_port) == ("0.0.0.0", 9090), key
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["metrics"] == 9090, key
        annotations = workloads[key]["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true", key
        assert annotations["prometheus.io/port"] == "9090", key
        assert annotations["prometheus.io/path"] == "/metrics", key
    nats = workloads["nats"]["spec"]["template"]["metadata"].get("annotations", {})
    assert not any(k.startswith("prometheus.io/") for k in nats)  # not a Heddle service

    # Without the annotations (a ServiceMonitor of your own, say) the ports stay.
    quiet = render(chart, {"metrics": {"annotations": False}})
    for w in quiet.workloads_by_key().values():
        assert "prometheus.io/scrape" not in w["spec"]["template"]["metadata"]["annotations"]
    _, orchestrator = quiet.heddle_containers()["orchestrator"]
    assert orchestrator["ports"] == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    # Port 0: no metrics port, nothing to scrape; the gateway keeps /metrics on its own.
    off = render(chart, {"settings": {"metricsPort": 0}})
    for key, (_, container) in off.heddle_containers().items():
        assert Settings.from_env(only_strings(off.env(container))).metrics_port == 0
        assert "metrics" not in {p["name"] for p in container.get("ports", [])}, key
        annotations = off.workloads_by_key()[key]["spec"]["template"]["metadata"]["annotations"]
        assert "prometheus.io/scrape" not in annotations, key


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


def test_rbac_is_the_pod_watch_and_nothing_else(chart: helm.Chart, default: Manifest) -> None:
    # The orchestrator alone: list and watch pods in the namespace, get nodes; no write, no
    # other resource. Only its pod mounts a token; a runner's step finds none to read.
    (role,) = default.of_kind("Role").values()
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    (cluster_role,) = default.of_kind("ClusterRole").values()
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    assert NAMESPACE in cluster_role["metadata"]["name"]  # one per release, cluster-wide
    orchestrator_sa = {
        "kind": "ServiceAccount",
        "name": "heddle-orchestrator",
        "namespace": NAMESPACE,
    }
    for kind, role_kind, bound in (
        ("RoleBinding", "Role", role),
        ("ClusterRoleBinding", "ClusterRole", cluster_role),
    ):
        (binding,) = default.of_kind(kind).values()
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": bound["metadata"]["name"],
        }
        assert binding["subjects"] == [orchestrator_sa]
    containers = default.heddle_containers()
    for name in DEFAULT_RUNNERS:
        runner_pod, _ = containers[name]
        assert runner_pod["serviceAccountName"] == "heddle-runner"
        assert runner_pod["automountServiceAccountToken"] is False
    for sa in default.of_kind("ServiceAccount").values():  # pods opt in, accounts never
        assert sa["automountServiceAccountToken"] is False, sa["metadata"]["name"]
    for component in ("gateway", "dispatcher"):
        pod, _ = containers[component]
        assert pod["serviceAccountName"] == "heddle", component
        assert pod["automountServiceAccountToken"] is False, component
    pod, container = containers["orchestrator"]
    assert pod["serviceAccountName"] == "heddle-orchestrator"
    assert pod["automountServiceAccountToken"] is True
    settings = Settings.from_env(only_strings(default.env(container)))
    assert settings.pod_watch == "auto"
    nats_pod = default.get("StatefulSet", "nats")["spec"]["template"]["spec"]
    assert nats_pod["automountServiceAccountToken"] is False

    # podWatch.nodes=false: no cluster-wide object at all.
    no_nodes = render(chart, {"podWatch": {"nodes": False}})
    assert not no_nodes.of_kind("ClusterRole") and not no_nodes.of_kind("ClusterRoleBinding")
    assert len(no_nodes.of_kind("Role")) == 1

    # podWatch.enabled=false: no RBAC, no token in any pod, and the orchestrator watches nothing.
    off = render(chart, {"podWatch": {"enabled": False}})
    for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        assert not off.of_kind(kind), kind
    for name, (pod, _) in off.heddle_containers().items():
        assert pod["automountServiceAccountToken"] is False, name
    _, container = off.heddle_containers()["orchestrator"]
    assert Settings.from_env(only_strings(off.env(container))).pod_watch == "off"
    assert "orchestrator-kube-api" not in off.of_kind("NetworkPolicy")


def test_the_pod_watch_selects_exactly_the_runner_pods(chart: helm.Chart) -> None:
    from heddle.services.orchestrator.pod_objects import RUNNER_LABEL

    for values in ({}, {"namePrefix": "blue-", "runners": {"replicas": 3}}):
        manifest = render(chart, values)
        _, container = manifest.heddle_containers()["orchestrator"]
        selector = Settings.from_env(only_strings(manifest.env(container))).runner_pod_selector
        wanted = dict(term.split("=", 1) for term in selector.split(","))

        def selected(labels: dict[str, str], wanted: dict[str, str] = wanted) -> bool:
            return all(labels.get(k) == v for k, v in wanted.items())

        picked = {
            w["spec"]["template"]["metadata"]["labels"].get(RUNNER_LABEL)
            for w in manifest.workloads()
            if selected(w["spec"]["template"]["metadata"]["labels"])
        }
        assert picked == set(manifest.runner_workloads()), values
        # A runner pod's runner is its label: the runner's own name (HEDDLE_RUNNER_NAME).
        for name, (_, c) in manifest.heddle_containers().items():
            if name in manifest.runner_workloads():
                assert manifest.env(c)["HEDDLE_RUNNER_NAME"] == name
        # Another release's runners in the same namespace are not this one's.
        other = {**wanted, "app.kubernetes.io/instance": "other"}
        assert not selected(other)


def test_the_orchestrator_may_reach_the_api_server(chart: helm.Chart, default: Manifest) -> None:
    policy = default.get("NetworkPolicy", "orchestrator-kube-api")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "orchestrator"
    )
    assert policy["spec"]["policyTypes"] == ["Egress"]
    (rule,) = policy["spec"]["egress"]
    assert [p["port"] for p in rule["ports"]] == [443, 6443] and "to" not in rule
    pinned = render(
        chart,
        {
            "podWatch": {
                "apiServer": {"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], "ports": [6443]}
            }
        },
    )
    (rule,) = pinned.get("NetworkPolicy", "orchestrator-kube-api")["spec"]["egress"]
    assert rule == {
        "ports": [{"protocol": "TCP", "port": 6443}],
        "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
    }


def test_autoscaling_renders_every_runner_and_lets_the_dispatcher_scale_them(
    chart: helm.Chart, default: Manifest
) -> None:
    on = render(
        chart,
        {
            "runners": {
                "replicas": 3,
                "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 6},
            }
        },
    )
    names = [f"runner-{i}" for i in range(6)]
    # Every runner the pool may grow to, with its user; runners.replicas of them at 1.
    sets = on.of_kind("StatefulSet")
    assert [sets[n]["spec"]["replicas"] for n in names] == [1, 1, 1, 0, 0, 0]
    users = on.get("Secret", "heddle-nats-users")
    assert {f"runner-{n}" for n in names} <= set(users.get("data") or users["stringData"])
    # The dispatcher: its own account and token, its settings, and a Role with get and patch
    # on these StatefulSets' scale, nothing else.
    pod, container = on.heddle_containers()["dispatcher"]
    assert pod["serviceAccountName"] == "heddle-dispatcher"
    assert pod["automountServiceAccountToken"] is True
    assert on.get("ServiceAccount", "heddle-dispatcher")["automountServiceAccountToken"] is False
    settings = Settings.from_env(only_strings(on.env(container)))
    assert (settings.autoscale, settings.autoscale_min, settings.autoscale_max) == ("on", 1, 6)
    assert (settings.autoscale_up_after, settings.autoscale_idle_after) == (30.0, 300.0)
    assert settings.runner_statefulset_prefix == "runner-"
    # The orchestrator hands no step to a runner: draining is the dispatcher's alone.
    _, orchestrator = on.heddle_containers()["orchestrator"]
    assert Settings.from_env(only_strings(on.env(orchestrator))).handoff == "off"
    _, orchestrator = default.heddle_containers()["orchestrator"]
    assert Settings.from_env(only_strings(default.env(orchestrator))).handoff == "on"
    role = on.get("Role", "heddle-autoscaler")
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets/scale"],
            "resourceNames": names,
            "verbs": ["get", "patch"],
        }
    ]
    binding = on.get("RoleBinding", "heddle-autoscaler")
    assert binding["roleRef"]["name"] == "heddle-autoscaler"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "heddle-dispatcher", "namespace": NAMESPACE}
    ]
    policy = on.get("NetworkPolicy", "dispatcher-kube-api")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "dispatcher"
    )
    assert [p["port"] for p in policy["spec"]["egress"][0]["ports"]] == [443, 6443]
    # Nothing else gains anything: the orchestrator's RBAC is as without autoscaling.
    assert set(on.of_kind("Role")) == {"heddle-pod-watch", "heddle-autoscaler"}
    # Off (the default): no such account, role, policy or setting.
    assert "heddle-autoscaler" not in default.of_kind("Role")
    assert "heddle-dispatcher" not in default.of_kind("ServiceAccount")
    assert "dispatcher-kube-api" not in default.of_kind("NetworkPolicy")
    _, container = default.heddle_containers()["dispatcher"]
    assert Settings.from_env(only_strings(default.env(container))).autoscale == "off"
    # A prefix reaches the StatefulSets' names the dispatcher scales.
    blue = render(chart, {"namePrefix": "blue-", "runners": {"autoscaling": {"enabled": True}}})
    _, container = blue.heddle_containers()["dispatcher"]
    prefix = Settings.from_env(only_strings(blue.env(container))).runner_statefulset_prefix
    assert prefix == "blue-runner-" and f"{prefix}7" in blue.of_kind("StatefulSet")


def test_autoscaling_refuses_a_minimum_above_the_maximum(chart: helm.Chart) -> None:
    bad = {"runners": {"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}}
    with pytest.raises(Exception, match=r"minReplicas must not exceed"):
        render(chart, bad)
    with pytest.raises(Exception, match="autoscaling"):
        render(chart, {"runners": {"autoscaling": {"enabled": True, "maxReplicas": 0}}})


def _several_roll_one_at_a_time(chart: helm.Chart, component: str) -> dict[str, Any]:
    """<component>.replicas 3: one Deployment of three pods, each named by its pod name
    (POD_NAME, which HEDDLE_<COMPONENT>_NAME defaults to; the chart sets no name), all the
    one NATS user, rolled (maxUnavailable 0) and drained (a budget of one) one at a time. One
    replica: rolled alike, no budget; 0 is refused. Returns the three pods' Deployment."""
    three = render(chart, {component: {"replicas": 3}})
    deployment = three.get("Deployment", component)
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    _, container = three.heddle_containers()[component]
    env = three.env(container)  # the settings ConfigMap's keys too
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert f"HEDDLE_{component.upper()}_NAME" not in env
    assert env["HEDDLE_NATS_USER"] == component
    pdb = three.get("PodDisruptionBudget", component)
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    one = render(chart, {})
    assert one.get("Deployment", component)["spec"]["replicas"] == 1
    assert one.get("Deployment", component)["spec"]["strategy"]["type"] == "RollingUpdate"
    assert component not in one.of_kind("PodDisruptionBudget")
    with pytest.raises(helm.HelmValuesError):
        render(chart, {component: {"replicas": 0}})
    return deployment


def test_several_dispatchers_roll_one_at_a_time_and_never_autoscale(chart: helm.Chart) -> None:
    """Several dispatchers share the ready steps; autoscaling, whose scaler is the one
    dispatcher that leases runners, is refused with them."""
    _several_roll_one_at_a_time(chart, "dispatcher")
    with pytest.raises(helm.HelmRenderError, match=r"needs dispatcher\.replicas 1"):
        render(
            chart,
            {"dispatcher": {"replicas": 2}, "runners": {"autoscaling": {"enabled": True}}},
        )


def test_several_orchestrators_roll_one_at_a_time_within_the_partitions(
    chart: helm.Chart,
) -> None:
    """Several orchestrators share the runs' partitions by leases; never more of them than
    partitions (each holds at least one)."""
    deployment = _several_roll_one_at_a_time(chart, "orchestrator")
    # The pod watch's RBAC is the ServiceAccount's, so every replica has it.
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "heddle-orchestrator"
    with pytest.raises(
        helm.HelmRenderError,
        match=r"orchestrator\.replicas \(13\) must not exceed settings\.partitions \(12\)",
    ):
        render(chart, {"orchestrator": {"replicas": 13}})
    sixteen = render(chart, {"orchestrator": {"replicas": 13}, "settings": {"partitions": 16}})
    assert sixteen.get("Deployment", "orchestrator")["spec"]["replicas"] == 13
    _, container = sixteen.heddle_containers()["orchestrator"]
    assert sixteen.env(container)["HEDDLE_PARTITIONS"] == "16"


def test_an_optional_service_monitor_scrapes_every_heddle_pod(
    chart: helm.Chart, default: Manifest
) -> None:
    assert not default.of_kind("ServiceMonitor") and "heddle-metrics" not in default.of_kind(
        "Service"
    )
    on = render(chart, {"metrics": {"serviceMonitor": {"enabled": True}}})
    monitor = on.get("ServiceMonitor", "heddle")
    jsonschema.validate(monitor, SERVICE_MONITOR)
    service = on.get("Service", "heddle-metrics")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    # The monitor selects the Service, in the release's namespace ...
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint == {"port": "metrics", "path": "/metrics", "interval": "30s"}
    assert monitor["spec"]["podTargetLabels"] == ["app.kubernetes.io/component"]
    # ... and the Service every Heddle pod with a metrics port, and only those.
    selector = service["spec"]["selector"]
    with_port = set()
    for w in on.workloads():
        pod = w["spec"]["template"]
        ports = {p.get("name") for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        if selector.items() <= pod["metadata"]["labels"].items() and "metrics" in ports:
            with_port.add(w["metadata"]["name"])
    assert with_port == {*CONTROL_PLANE, *DEFAULT_RUNNERS}
    # A metrics port is needed.
    with pytest.raises(Exception, match=r"needs settings\.metricsPort"):
        render(
            chart,
            {"metrics": {"serviceMonitor": {"enabled": True}}, "settings": {"metricsPort": 0}},
        )
    with pytest.raises(Exception, match="interval"):
        render(chart, {"metrics": {"serviceMonitor": {"enabled": True, "interval": "soon"}}})


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
