"""The privileges Heddle's containers grant, applied to local processes: a runner started
under ``container_runner_prefix()`` holds only the capabilities docker-compose.yml's runners
add (the chart's runner securityContext adds the same, tests/deploy/test_deploy_security.py), with
no way to gain more, as in its container."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys

import yaml

from tests.support.chart_render import COMPOSE_FILE, ROOT


def runner_capabilities() -> list[str]:
    """What docker-compose.yml's runners add back after dropping every capability."""
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    runner = compose["services"]["runner-0"]
    assert runner["cap_drop"] == ["ALL"], runner
    return sorted(runner["cap_add"])


def container_runner_prefix() -> list[str]:
    """An argv prefix that runs a root process as the runner's container would: only the
    runner's capabilities in its bounding set, none inheritable, no new privileges. Empty
    where the tests do not run as root: a runner that is not root runs steps as itself."""
    if os.geteuid() != 0:
        return []
    keep = ",".join(f"+{cap.lower()}" for cap in runner_capabilities())
    return ["setpriv", f"--bounding-set=-all,{keep}", "--inh-caps=-all", "--no-new-privs"]


def container_step_user() -> tuple[str, int]:
    """An explicit HEDDLE_STEP_USER shared by every runner (nobody), and the uid steps then
    run as: the path where no uid of the runner's own is used."""
    if os.geteuid() != 0:
        return "none", os.geteuid()
    return "65534", pwd.getpwuid(65534).pw_uid


def run_as_runner_container(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A Python script run from the repository as a runner in its container would run it."""
    return subprocess.run(
        [*container_runner_prefix(), sys.executable, "-c", script, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
