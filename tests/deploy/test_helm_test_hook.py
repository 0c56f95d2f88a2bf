"""The chart's `helm test` hook (templates/tests/helm-test.yaml): rendered with real Helm and
valid Kubernetes (tests/deploy/test_deploy.py validates every object), a test hook that reaches the
gateway with the admin token; and its very command, as rendered, run against a real stack: it
submits a run and waits for it, exiting 0 when the run succeeds and non-zero otherwise."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
from heddle.shared.wire.version import VERSION

from tests.support.chart_render import KUBE_VERSION, Manifest, render
from tests.support.stack import StackFactory

TOKEN_DIR = "/var/run/heddle/admin"


def hook_pod(manifest: Manifest) -> dict[str, Any]:
    (pod,) = manifest.of_kind("Pod").values()
    return pod


def test_the_hook_is_a_test_pod_with_the_admin_token(chart: helm.Chart, default: Manifest) -> None:
    pod = hook_pod(default)
    kubernetes_validate.validate(pod, KUBE_VERSION, strict=True)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 300
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["image"] == f"heddle:{VERSION}"
    assert "heddle submit --wait" in container["args"][-1]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GATEWAY"] == "http://gateway:8080"  # a name the gateway answers
    assert json.loads(env["WORKFLOW"])["steps"][1]["dependsOn"] == ["hello"]
    (volume,) = spec["volumes"]
    assert volume["secret"]["secretName"] == "heddle-admin-token"
    assert container["volumeMounts"][0]["mountPath"] == TOKEN_DIR
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    # The gateway's NetworkPolicy lets it in when it names who may reach the gateway ...
    (http,) = [
        rule
        for rule in default.get("NetworkPolicy", "gateway")["spec"]["ingress"]
        if rule["ports"][0]["port"] == 8080
    ]
    assert {
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "heddle",
                "app.kubernetes.io/instance": "heddle",
                "app.kubernetes.io/component": "test",
            }
        }
    } in http["from"]
    assert (
        pod["metadata"]["labels"].items() >= http["from"][-1]["podSelector"]["matchLabels"].items()
    )
    # ... and a prefix and port reach its URL; off, there is no hook.
    blue = hook_pod(render(chart, {"namePrefix": "blue-", "gateway": {"service": {"port": 80}}}))
    blue_env = {e["name"]: e["value"] for e in blue["spec"]["containers"][0]["env"]}
    assert blue_env["GATEWAY"] == "http://blue-gateway:80"
    assert not render(chart, {"helmTest": {"enabled": False}}).of_kind("Pod")


async def run_hook(pod: dict[str, Any], gateway: str, token: Path, **env: str) -> tuple[int, str]:
    """The hook's container command, as rendered, on this machine: its token path pointed at
    ``token``, its gateway at the stack's."""
    (container,) = pod["spec"]["containers"]
    argv = [a.replace(f"{TOKEN_DIR}/token", str(token)) for a in container["args"]]
    values = {e["name"]: e["value"] for e in container["env"]}
    values.update(GATEWAY=gateway, **env)
    bin_dir = str(Path(sys.executable).parent)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env={**os.environ, **values, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


async def test_the_hook_submits_a_run_and_waits_for_it(
    default: Manifest, stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=1)
    token = tmp_path / "token"
    token.write_text(s.admin_token)
    pod = hook_pod(default)
    code, out = await run_hook(pod, s.base, token)
    assert code == 0, out
    _, runs = await s.request("GET", "/api/runs")
    (run,) = runs["runs"]
    assert run["status"] == "succeeded", run
    # A run that fails fails the hook; a wrong token too.
    failing = json.dumps({"steps": [{"id": "hello", "command": "exit 3"}]})
    code, out = await run_hook(pod, s.base, token, WORKFLOW=failing)
    assert code != 0, out
    token.write_text("hdl_" + "x" * 43)
    code, out = await run_hook(pod, s.base, token)
    assert code != 0, out
