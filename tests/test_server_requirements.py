"""Services refuse a NATS server they cannot rely on, with a message that says what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from heddle.services.local.embedded_nats import find_binary, free_port, port_open
from heddle.shared.broker.resources import MIN_API_LEVEL, check_api_level
from heddle.shared.wire.errors import NatsTooOld

from tests.stack import REPO


@pytest.mark.parametrize("level", [0, 1, 3])
def test_too_old_api_level_names_the_version_needed(level: int) -> None:
    with pytest.raises(NatsTooOld, match=r"needs nats-server 2\.14 or newer"):
        check_api_level(level)
    check_api_level(MIN_API_LEVEL)


@pytest.mark.parametrize("service", ["orchestrator", "runner"])
def test_service_refuses_a_server_without_jetstream(tmp_path: Path, service: str) -> None:
    port = free_port()
    server = subprocess.Popen(
        [find_binary(), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not port_open(port):
            assert server.poll() is None
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")}
        # Steps as the runner itself: a runner as root would first need a name for its uid.
        env.update(
            HEDDLE_NATS_URL=f"nats://127.0.0.1:{port}",
            HEDDLE_STEP_USER="none",
            PYTHONPATH=str(REPO),
        )
        done = subprocess.run(
            [sys.executable, "-m", "heddle.services.cli", service],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        server.terminate()
        server.wait()
    assert done.returncode == 2
    assert "JetStream is not enabled on this NATS server" in done.stderr
    assert "Traceback" not in done.stderr
