"""What a service's readiness probe answers (shared/runtime/service.py, Health), without I/O:
starting, ready, cut off from NATS, stopping. The probes asked of real processes, frozen and cut
off: tests/fault/test_probes.py."""

from __future__ import annotations

import pytest
from heddle.shared.runtime.health import Health


class _Conn:
    def __init__(self, connected: bool) -> None:
        self.is_connected = connected


class _Service:
    def __init__(self, nc: object | None) -> None:
        self.nc = nc


@pytest.mark.parametrize(
    ("started", "stopping", "nc", "expected"),
    [
        (False, False, _Conn(True), (False, "starting")),
        (True, False, _Conn(True), (True, "ready")),
        (True, False, _Conn(False), (False, "NATS disconnected")),
        (True, False, None, (True, "ready")),
        (True, True, _Conn(True), (False, "stopping")),
        (False, True, _Conn(False), (False, "stopping")),
    ],
)
def test_health(started: bool, stopping: bool, nc: object, expected: tuple[bool, str]) -> None:
    health = Health(_Service(nc))
    health.started, health.stopping = started, stopping
    assert health.ready() == expected


def test_a_service_without_a_connection_to_ask_is_refused() -> None:
    with pytest.raises(TypeError, match="has no nc"):
        Health(object())


def test_every_service_shows_its_probe_its_connection() -> None:
    """Built, not started: each one's ``nc`` is there for the probe to ask (None until its
    start connects)."""
    from heddle.services.dispatcher.app import Dispatcher
    from heddle.services.gateway.app import Gateway
    from heddle.services.orchestrator.app import Orchestrator
    from heddle.services.runner_agent.app import RunnerAgent
    from heddle.shared.runtime.settings import Settings

    for kind in (Gateway, Orchestrator, Dispatcher, RunnerAgent):
        service = kind(Settings())
        assert service.nc is None, kind
        Health(service)
