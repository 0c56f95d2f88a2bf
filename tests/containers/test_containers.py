"""Heddle in a real container engine: the compose deployment as written, the image's own
command line, a runner killed inside its container, three orchestrators, and the chart's
runner security context applied to a runner started with `docker run`.

The tests run in this order and share one deployment; each leaves it as it found it."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from heddle.services.runner_agent.isolation import runner_step_user
from heddle.shared.runtime.settings import Settings

from tests.containers.conftest import Deployment, note, run_cli
from tests.containers.deployment import ROOT, step_of
from tests.support.chart_render import render

# What a runner's process looks like inside its container: tini's child named heddle.
KILL_RUNNER = """
import os, signal
for pid in filter(str.isdigit, os.listdir("/proc")):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    comm = open(f"/proc/{pid}/comm").read().strip()
    if fields[1] == "1" and comm == "heddle":
        os.kill(int(pid), signal.SIGKILL)
        print(pid)
"""
# The processes a container runs besides tini, heddle and this probe.
OTHERS = """
import os
mine = {"1", str(os.getpid())}
for pid in filter(str.isdigit, os.listdir("/proc")):
    comm = open(f"/proc/{pid}/comm").read().strip()
    if pid not in mine and comm not in ("heddle", "python", "python3"):
        print(pid, comm)
"""


def test_the_demo_runs_through_the_published_port(deployment: Deployment, demo: dict) -> None:
    started = time.monotonic()
    status, body = deployment.request("POST", "/api/runs", demo)
    assert status == 201, body
    run = deployment.wait_run(body["runId"])
    seconds = time.monotonic() - started
    assert run["status"] == "succeeded", run
    assert [s["status"] for s in run["steps"]] == ["succeeded"] * 4
    assert step_of(run, "A")["stdoutTail"].strip() == "hello"
    note(f"demo over the published port 127.0.0.1:{deployment.port}: {run['status']} "
         f"in {seconds:.2f} s")  # fmt: skip


def test_the_demo_runs_with_the_image_s_own_command_line(deployment: Deployment) -> None:
    run_id = f"cli-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    text = (ROOT / "docs" / "examples" / "demo.yaml").read_text()
    done = run_cli(deployment, "submit", "-", "--run-id", run_id, "--wait", stdin=text)
    seconds = time.monotonic() - started
    assert done.returncode == 0, (done.stdout, done.stderr)
    run = deployment.wait_run(run_id)
    assert run["status"] == "succeeded"
    listed = run_cli(deployment, "runs", "--json")
    assert listed.returncode == 0 and run_id in listed.stdout, listed
    note(f"demo with `docker compose exec gateway heddle submit - --wait`: exit 0, "
         f"{run['status']} in {seconds:.2f} s")  # fmt: skip


def test_a_runner_killed_inside_its_container_mid_step_ends_its_attempt(
    deployment: Deployment,
) -> None:
    """The runner's process dies (SIGKILL inside the container, not `docker kill`): the
    attempt it held is retried elsewhere, and Docker restarts the container."""
    doc = {
        "steps": [
            {
                "id": "long",
                "retries": 1,
                "command": 'if [ "$HEDDLE_ATTEMPT" = 1 ]; then sleep 60; fi; echo done',
            }
        ]
    }
    status, body = deployment.request("POST", "/api/runs", doc)
    assert status == 201, body
    step = deployment.wait_step(body["runId"], "long", {"running"})
    (container,) = deployment.containers(step["runner"])
    # The runner is the container's main process: its death stops the container, which may
    # take the exec down with it (137) once it has said which pid it killed.
    done = deployment.engine.docker(
        "exec", "-u", "0", container, "python", "-c", KILL_RUNNER, check=False
    )
    killed = done.stdout.split()
    assert done.returncode in (0, 137) and len(killed) == 1, (done.returncode, done.stderr)
    at = time.monotonic()
    run = deployment.wait_run(body["runId"], timeout=120)
    seconds = time.monotonic() - at
    long = step_of(run, "long")
    assert (run["status"], long["attempt"]) == ("succeeded", 2), run
    deployment.wait_ready(runners=2)
    restarts = deployment.engine.docker(
        "inspect", "-f", "{{.RestartCount}}", container
    ).stdout.strip()
    assert int(restarts) >= 1
    note(f"runner {step['runner']} SIGKILLed inside its container mid-step: the run "
         f"{run['status']} on attempt 2, {seconds:.1f} s after the kill; the container "
         f"restarted ({restarts}), the pool back to 2")  # fmt: skip


# The chart's runner securityContext keys, each as `docker run` applies it.
KNOWN_CONTAINER_KEYS = {
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "allowPrivilegeEscalation",
    "readOnlyRootFilesystem",
    "capabilities",
}
KNOWN_POD_KEYS = {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "seccompProfile"}


def docker_run_security(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """`docker run` options for a pod's and a container's security contexts (the container's
    wins); a key this does not know fails the test rather than being left out."""
    pod_sc, sc = pod.get("securityContext", {}), container["securityContext"]
    assert set(sc) <= KNOWN_CONTAINER_KEYS, set(sc) - KNOWN_CONTAINER_KEYS
    assert set(pod_sc) <= KNOWN_POD_KEYS, set(pod_sc) - KNOWN_POD_KEYS
    merged = {**pod_sc, **sc}
    user, group = merged["runAsUser"], merged["runAsGroup"]
    if merged.get("runAsNonRoot"):
        assert user != 0
    options = ["--user", f"{user}:{group}", "--cap-drop", "ALL"]
    caps = sc.get("capabilities", {})
    assert caps.get("drop") == ["ALL"], caps
    for cap in caps.get("add", []):
        options += ["--cap-add", cap]
    if merged.get("readOnlyRootFilesystem"):
        options += ["--read-only", "--tmpfs", "/tmp"]
    if merged.get("allowPrivilegeEscalation") is False:
        options += ["--security-opt", "no-new-privileges"]
    seccomp = merged.get("seccompProfile", {}).get("type")
    assert seccomp in ("RuntimeDefault", None), seccomp  # Docker's default profile applies
    if "fsGroup" in pod_sc:
        options += ["--group-add", str(pod_sc["fsGroup"])]
    if "workingDir" in container:
        options += ["-w", container["workingDir"]]
    return options


STEP_USER_SETTINGS = ("HEDDLE_STEP_UIDS", "HEDDLE_STEP_USER")


def chart_step_uid(env: dict[str, Any]) -> int:
    """The uid a runner of the chart runs its steps as (runner-N: the N-th of stepUids)."""
    strings = {k: v for k, v in env.items() if isinstance(v, str)}
    user = runner_step_user(Settings.from_env(strings), euid=0)
    assert user is not None
    return user.uid


@pytest.fixture
def chart_runner(deployment: Deployment, chart: Any) -> Any:
    """runner-1 as the chart's pod would run it, in place of compose's two runners."""
    manifest = render(chart)
    pod, container = manifest.heddle_containers()["runner-1"]
    env = manifest.env(container)
    options = docker_run_security(pod, container)
    assert "seccomp" in deployment.engine.docker("info", "-f", "{{.SecurityOptions}}").stdout
    deployment.compose("stop", "runner-0", "runner-1")
    name = f"{deployment.project}-chart-runner"
    deployment.engine.docker(
        "run", "-d", "--name", name, "--network", f"{deployment.project}_default",
        *options,
        "-e", "HEDDLE_NATS_URL=nats://nats:4222",
        "-e", f"HEDDLE_NATS_USER={env['HEDDLE_NATS_USER']}",
        "-e", f"HEDDLE_RUNNER_NAME={env['HEDDLE_RUNNER_NAME']}",
        *(a for k in STEP_USER_SETTINGS if k in env for a in ("-e", f"{k}={env[k]}")),
        "-e", "HEDDLE_NATS_PASSWORD_FILE=/run/heddle/password",
        "-v", f"{deployment.project}_runner-1-secrets:/run/heddle:ro",
        "heddle:local", *container["args"],
    )  # fmt: skip
    try:
        deployment.wait_ready(runners=1)
        yield name, options, str(chart_step_uid(env))
    finally:
        deployment.engine.docker("rm", "-f", name, check=False)
        deployment.compose("start", "runner-0", "runner-1")
        deployment.wait_ready(runners=2)


def test_the_chart_s_runner_security_context_runs_steps(
    deployment: Deployment, chart_runner: Any
) -> None:
    name, options, step_user = chart_runner
    doc = {
        "steps": [
            {"id": "out", "command": "echo who=$(id -u) >> $HEDDLE_OUTPUTS"},
            {"id": "use", "command": 'echo "got $HEDDLE_OUT_OUT_WHO"', "dependsOn": ["out"]},
            {"id": "slow", "command": "sleep 30", "timeoutSeconds": 2},
        ]
    }
    status, body = deployment.request("POST", "/api/runs", doc)
    assert status == 201, body
    run = deployment.wait_run(body["runId"])
    out, use, slow = (step_of(run, s) for s in ("out", "use", "slow"))
    assert (out["status"], out["outputs"]) == ("succeeded", {"who": step_user}), out
    assert use["stdoutTail"].strip() == f"got {step_user}"
    assert (slow["status"], slow["reason"]) == ("failed", "timed out after 2 s"), slow

    status, body = deployment.request(
        "POST", "/api/runs", {"steps": [{"id": "long", "command": "sleep 60"}]}
    )
    assert status == 201, body
    deployment.wait_step(body["runId"], "long", {"running"})
    status, _ = deployment.request("POST", f"/api/runs/{body['runId']}/cancel")
    assert status in (200, 202)
    run = deployment.wait_run(body["runId"])
    assert (run["status"], step_of(run, "long")["status"]) == ("cancelled", "cancelled")
    deadline = time.monotonic() + 20
    while others := deployment.engine.docker("exec", name, "python", "-c", OTHERS).stdout:
        assert time.monotonic() < deadline, f"left running after the cancel: {others}"
        time.sleep(0.5)
    note(
        f"the chart's runner security context ({' '.join(options)}): outputs from uid "
        f"{step_user}, a timeout and a cancel (nothing left running) all as expected"
    )


def test_three_orchestrators_share_the_runs(deployment: Deployment, demo: dict) -> None:
    deployment.compose("up", "-d", "--no-build", "--no-recreate", "--scale", "orchestrator=3")
    try:
        assert len(deployment.containers("orchestrator")) == 3
        ids = []
        for _ in range(6):
            status, body = deployment.request("POST", "/api/runs", demo)
            assert status == 201, body
            ids.append(body["runId"])
        assert {deployment.wait_run(i)["status"] for i in ids} == {"succeeded"}
        # One of the three gone for good: its partitions are taken over.
        deployment.engine.docker("kill", deployment.containers("orchestrator")[0])
        status, body = deployment.request("POST", "/api/runs", demo)
        assert deployment.wait_run(body["runId"], timeout=90)["status"] == "succeeded"
    finally:
        deployment.compose("up", "-d", "--no-build", "--scale", "orchestrator=1")
    note("orchestrator scaled to 3: 6 demo runs succeeded; one killed, the next succeeded")
