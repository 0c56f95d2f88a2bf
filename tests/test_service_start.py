"""A service process imports what it uses: nats-py's WebSocket transport needs aiohttp, which
a service that serves no HTTP and dials NATS over TCP goes without (services/cli/main.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.stack import REPO

PROBE = """
import sys
from heddle.services.cli.main import without_websocket_client
from heddle.shared.runtime.settings import Settings
without_websocket_client({name!r}, Settings(**{settings!r}))
import nats, heddle.shared.broker.acked
print(sys.modules.get("aiohttp") is not None)
"""


@pytest.mark.parametrize(
    ("name", "settings", "loaded"),
    [
        ("runner", {"nats_url": "nats://127.0.0.1:4222"}, False),
        ("orchestrator", {"nats_url": "nats://a:4222, nats://b:4222"}, False),
        ("dispatcher", {"nats_url": "nats://127.0.0.1:4222", "metrics_port": 9090}, True),
        ("runner", {"nats_url": "nats://a:4222,ws://b:8080"}, True),
        ("gateway", {"nats_url": "nats://127.0.0.1:4222"}, True),
    ],
)
def test_aiohttp_is_imported_only_where_it_is_used(
    name: str, settings: dict[str, object], loaded: bool
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(name=name, settings=settings)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(loaded), out.stderr
