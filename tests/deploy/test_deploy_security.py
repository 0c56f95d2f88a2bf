"""The chart's security: the NATS users and permissions (the same as
shared/broker/nats_permissions.py), each workload's own password, the runner's privileges, the admin
token, the Host names the gateway answers to, the NetworkPolicies, and the rendered users on a real
nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
from heddle.services.local.embedded_nats import find_binary, free_port, port_open
from heddle.services.runner_agent.isolation import runner_step_user
from heddle.shared.broker import nats_accounts
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.broker.nats_io import connect
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.core.hosts import AllowedHosts
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

from tests.support.chart_render import (
    ADMIN_SECRET,
    AUTH_SECRET,
    DEFAULT_RUNNERS,
    NAMESPACE,
    USERS_SECRET,
    Manifest,
    nats_url_target,
    only_strings,
    render,
)
from tests.support.cli import heddle
from tests.support.nats_clients import login

# --- the chart: NATS users and passwords ---------------------------------------------------------


def accounts(manifest: Manifest, prefix: str = "") -> dict[str, Any]:
    """The server configuration the chart gives NATS (`accounts: {json}`)."""
    text = manifest.secret_data(prefix + AUTH_SECRET)["auth.conf"]
    key, _, value = text.partition(":")
    assert key == "accounts", text[:80]  # nothing else: no no_auth_user, token or default user
    return {"accounts": json.loads(value)}


def authorization(manifest: Manifest, prefix: str = "") -> list[dict[str, Any]]:
    """Every user of the chart's NATS configuration, by name, each checked to be in the
    account shared/broker/nats_accounts.py puts it in."""
    users = nats_accounts.users_in(accounts(manifest, prefix))
    for user, (account, _) in users.items():
        assert account == nats_accounts.account_of(user), user
    return [entry for _, (_, entry) in sorted(users.items())]


def test_nats_accounts_are_exactly_nats_accounts(default: Manifest) -> None:
    """files/nats-accounts.json copies links() of shared/broker/nats_accounts.py: any drift fails
    here (regenerate it with `python -c 'import json; from shared import nats_accounts as a;
    print(json.dumps(a.links(), indent=2))'`)."""
    config = accounts(default)["accounts"]
    links = nats_accounts.links()
    assert set(config) == set(links)
    for name, block in config.items():
        assert {k: v for k, v in block.items() if k in ("exports", "imports")} == links[name]
    assert [a for a, block in config.items() if "jetstream" in block] == [nats_accounts.HEDDLE]


@pytest.mark.parametrize(
    ("values", "runners"),
    [
        ({}, DEFAULT_RUNNERS),
        ({"nats": {"namespaceInspectors": ["team-a", "team-b"]}}, DEFAULT_RUNNERS),
        ({"runners": {"replicas": 5}}, tuple(f"runner-{i}" for i in range(5))),
        ({"namePrefix": "blue-", "runners": {"replicas": 1}}, ("blue-runner-0",)),
        ({"runners": {"replicas": 0}}, ()),
        (
            {
                "namePrefix": "blue-",
                "runners": {"replicas": 1, "pools": [{"name": "gpu", "stepUids": "61100-61101"}]},
            },
            ("blue-runner-0", "blue-runner-gpu-0"),
        ),
    ],
)
def test_nats_users_are_exactly_nats_permissions(
    chart: helm.Chart, values: dict, runners: tuple[str, ...]
) -> None:
    """templates/_nats.tpl copies shared/broker/nats_permissions.py: any drift fails here."""
    manifest = render(chart, values)
    prefix = values.get("namePrefix", "")
    users = authorization(manifest, prefix)
    inspectors = values.get("nats", {}).get("namespaceInspectors", [])
    expected = {
        *perms.SERVICES,
        perms.INSPECTOR,
        perms.BACKUP,
        *map(perms.runner_user, runners),
        *map(perms.namespace_inspector_user, inspectors),
    }
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


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"runners": {"replicas": 5}, "settingsSecret": "extra"},
        {"runners": {"pools": [{"name": "gpu", "replicas": 2, "stepUids": "61100-61199"}]}},
    ],
)
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


@pytest.mark.parametrize(
    ("step_user", "expected"),
    [
        # Each runner its own uid (runner-N the N-th of runners.stepUids), killed by uid.
        (None, {"runner-0": (60600, True), "runner-1": (60601, True)}),
        ("nobody", {"runner-0": (65534, False), "runner-1": (65534, False)}),
    ],
)
def test_runner_is_root_only_to_drop_to_the_step_user(
    chart: helm.Chart, step_user: str | None, expected: dict[str, tuple[int, bool]]
) -> None:
    values = {"runners": {"stepUser": step_user}} if step_user else {}
    manifest = render(chart, values)
    uids = {}
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
        assert env.get("HEDDLE_STEP_USER") == step_user, name
        assert env["HEDDLE_STEP_UIDS"] == "60600-61099", name
        user = runner_step_user(Settings.from_env(only_strings(env)), euid=0)
        assert user is not None, name
        uids[name] = (user.uid, user.own)
    assert uids == expected


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


def policies_for(manifest: Manifest, workload: str) -> list[dict[str, Any]]:
    """Every policy that selects the workload's pods: their rules add up."""
    return [
        p["spec"]
        for p in manifest.of_kind("NetworkPolicy").values()
        if workload in pods_selected(manifest, p["spec"]["podSelector"])
    ]


def policy_for(manifest: Manifest, workload: str) -> dict[str, Any]:
    """The one policy that isolates the workload's ingress (and its egress)."""
    (spec,) = [s for s in policies_for(manifest, workload) if "Ingress" in s["policyTypes"]]
    return spec


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


def selector_labels(component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "heddle",
        "app.kubernetes.io/instance": "heddle",
        "app.kubernetes.io/component": component,
    }


def test_gateway_policy_follows_its_value(chart: helm.Chart, default: Manifest) -> None:
    spec = policy_for(default, "gateway")
    assert pods_selected(default, spec["podSelector"]) == {"gateway"}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}]
    # Default: pods of the release's namespace; and `helm test`'s pod, named (the entry that
    # still lets it in when the value is narrowed).
    helm_test = {"podSelector": {"matchLabels": selector_labels("test")}}
    assert rule["from"] == [{"podSelector": {}}, helm_test]
    assert pods_selected(default, helm_test["podSelector"]) == set()  # not a workload
    assert egress_is_nats_and_dns(spec, default) == []

    ingress = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}}]
    custom = render(chart, {"gateway": {"networkPolicy": {"from": ingress}}})
    (rule,) = policy_for(custom, "gateway")["ingress"]
    assert rule["from"] == [*ingress, helm_test]
    no_test = render(
        chart, {"gateway": {"networkPolicy": {"from": ingress}}, "helmTest": {"enabled": False}}
    )
    (rule,) = policy_for(no_test, "gateway")["ingress"]
    assert rule["from"] == ingress
    anywhere = render(chart, {"gateway": {"networkPolicy": {"from": []}}})
    (rule,) = policy_for(anywhere, "gateway")["ingress"]
    assert "from" not in rule  # the port, from any source


def test_the_gateway_reaches_notify_targets_only_where_its_value_says(
    chart: helm.Chart, default: Manifest
) -> None:
    """No notify egress by default; gateway.networkPolicy.notify opens its ranges and ports
    to the gateway alone."""
    assert egress_is_nats_and_dns(policy_for(default, "gateway"), default) == []
    notify = {"cidrs": ["203.0.113.0/24", "0.0.0.0/0"], "ports": [443, 8443]}
    opened = render(chart, {"gateway": {"networkPolicy": {"notify": notify}}})
    (rule,) = egress_is_nats_and_dns(policy_for(opened, "gateway"), opened)
    assert rule == {
        "to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}, {"ipBlock": {"cidr": "0.0.0.0/0"}}],
        "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 8443}],
    }
    for name in ("orchestrator", "dispatcher", *DEFAULT_RUNNERS):
        assert egress_is_nats_and_dns(policy_for(opened, name), opened) == [], name


def test_runners_and_control_plane_reach_only_nats_and_dns(
    chart: helm.Chart, default: Manifest
) -> None:
    for name in ("orchestrator", "dispatcher", *DEFAULT_RUNNERS):
        spec = policy_for(default, name)
        assert spec["policyTypes"] == ["Ingress", "Egress"], name
        assert not spec.get("ingress"), name  # they serve nothing
        assert egress_is_nats_and_dns(spec, default) == [], name
        assert "nats" not in pods_selected(default, spec["podSelector"])
        others = [s for s in policies_for(default, name) if s is not spec]
        if name == "orchestrator":
            # Its pod watch: the API server's ports, egress only, for the orchestrator alone.
            (api,) = others
            assert api["policyTypes"] == ["Egress"]
            assert pods_selected(default, api["podSelector"]) == {"orchestrator"}
            (rule,) = api["egress"]
            assert {p["port"] for p in rule["ports"]} == {443, 6443}
        else:
            assert others == [], name
    # Steps that need more network get it from a value.
    more = [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 443}]}]
    opened = render(chart, {"runners": {"networkPolicy": {"egress": more}}})
    assert egress_is_nats_and_dns(policy_for(opened, "runner-0"), opened) == more
    assert egress_is_nats_and_dns(policy_for(opened, "orchestrator"), opened) == []


def test_metrics_are_scraped_only_from_the_named_source(chart: helm.Chart) -> None:
    # By default nothing may reach a metrics port (the policies above have no such rule).
    prometheus = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}]
    opened = render(chart, {"metrics": {"networkPolicy": {"from": prometheus}}})
    scrape = {"from": prometheus, "ports": [{"protocol": "TCP", "port": 9090}]}
    for name in ("gateway", "orchestrator", "dispatcher", *DEFAULT_RUNNERS):
        assert scrape in policy_for(opened, name)["ingress"], name
    assert scrape not in policy_for(opened, "nats")["ingress"]
    # The gateway's HTTP port keeps its own rule.
    assert policy_for(opened, "gateway")["ingress"][0]["ports"] == [
        {"protocol": "TCP", "port": 8080}
    ]
    moved = render(
        chart,
        {"settings": {"metricsPort": 9100}, "metrics": {"networkPolicy": {"from": prometheus}}},
    )
    (rule,) = policy_for(moved, "orchestrator")["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9100}]
    off = render(
        chart, {"settings": {"metricsPort": 0}, "metrics": {"networkPolicy": {"from": prometheus}}}
    )
    assert not policy_for(off, "orchestrator").get("ingress")


@pytest.mark.parametrize(
    "values",
    [
        {"runners": {"stepUser": "root"}},
        {"metrics": {"networkPolicy": {"from": "prometheus"}}},
        {"metrics": {"annotation": True}},
        {"settings": {"metricsPort": 70000}},
        {"runners": {"stepUser": 0}},
        {"runners": {"stepUser": "0"}},
        {"runners": {"stepUser": "no body"}},
        {"runners": {"stepUids": "0-10"}},  # root
        {"runners": {"stepUids": "60600-"}},
        {"runners": {"stepUids": 60600}},
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


@pytest.mark.parametrize(
    ("runners", "why"),
    [
        ({"replicas": 3, "stepUids": "60600-60601"}, "holds 2 uids, for 3 runners"),
        (
            {"autoscaling": {"enabled": True, "maxReplicas": 8}, "stepUids": "60600-60606"},
            "holds 7 uids, for 8 runners",
        ),
        ({"stepUids": "65000-66000"}, "holds 65534 or 65535"),
        ({"stepUids": "60601-60600"}, "FIRST is above LAST"),
        ({"stepUids": "60600-4294967295"}, "uids go up to 2147483647"),
    ],
)
def test_the_chart_refuses_step_uids_runners_would_share(
    chart: helm.Chart, runners: dict, why: str
) -> None:
    """Two runners never get one step uid (each kills every process of its own after a
    step), nor does one get nobody's."""
    with pytest.raises(helm.HelmRenderError, match=why):
        render(chart, {"runners": runners})


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
        client = await login(url, runner, passwords[runner])
        nc = client.nc
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
            assert client.errors == []
            await nc.publish(names.kv_subject(names.RUNS_BUCKET, "x"), b"{}")
            await nc.flush()
            await client.refused()
        finally:
            await nc.close()

        # The backup user backs the release up (docs/backup.md, "On Kubernetes").
        env = {
            "HEDDLE_NATS_URL": url,
            "HEDDLE_NATS_USER": perms.BACKUP,
            "HEDDLE_NATS_PASSWORD": passwords[perms.BACKUP],
        }
        rc, out, err = await heddle("backup", str(tmp_path / "backup"), env=env)
        assert rc == 0 and out.startswith(f"backed up {len(perms.ALL_STREAMS)} streams"), err

        # No anonymous client, and no runner with another runner's password.
        other = passwords[perms.runner_user("runner-1")]
        for credentials in ({}, {"user": runner, "pass": other}):
            answer = await raw_connect(port, credentials)
            assert answer == b"-ERR 'Authorization Violation'", credentials


def test_nats_box_is_the_inspector_and_reaches_nats_only(chart: helm.Chart) -> None:
    manifest = render(chart, {"natsBox": {"enabled": True}})
    box = manifest.get("Deployment", "nats-box")
    pod = box["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["NATS_USER"] == perms.INSPECTOR
    assert env["NATS_PASSWORD"] == {
        "secretKeyRef": {"name": USERS_SECRET, "key": perms.INSPECTOR}
    }  # its own key, no other password
    name, port = nats_url_target(manifest)
    assert env["NATS_URL"] == f"nats://{name}:{port}"
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # The user it logs in as is read-only (shared/broker/nats_permissions.py's inspector).
    (inspector,) = [u for u in authorization(manifest) if u["user"] == perms.INSPECTOR]
    assert inspector["permissions"] == perms.permissions_for(perms.INSPECTOR).to_config()
    assert inspector["password"] == manifest.secret_data(USERS_SECRET)[perms.INSPECTOR]
    # NATS lets it in on the client port; it reaches NATS and DNS alone; nothing reaches it.
    (client_rule, *_) = policy_for(manifest, "nats")["ingress"]
    assert any(
        "nats-box" in pods_selected(manifest, peer["podSelector"])
        for peer in client_rule["from"]
        if "podSelector" in peer
    )
    spec = policy_for(manifest, "nats-box")
    assert spec["policyTypes"] == ["Ingress", "Egress"] and not spec.get("ingress")
    assert egress_is_nats_and_dns(spec, manifest) == []
    # Off by default.
    assert "nats-box" not in render(chart).of_kind("Deployment")
