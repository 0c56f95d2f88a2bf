"""A service's readiness, as its probe sees it (shared/runtime/metrics_http.py serves it;
shared/runtime/service.py sets it as the service starts and stops)."""

from __future__ import annotations


class Health:
    """What a service's readiness probe asks (``GET /readyz`` on its metrics port): ready once
    ``start()`` has returned (connected, streams ensured, consumers bound), while its NATS
    connection (``service.nc``) is up, and until it starts stopping. Liveness needs no state:
    that the event loop answers at all is the proof."""

    def __init__(self, service: object) -> None:
        # A service without ``nc`` would read as ready through any outage: refused here,
        # where a rename would otherwise pass unseen.
        if not hasattr(service, "nc"):
            raise TypeError(f"{type(service).__name__} has no nc: its probe could not see NATS")
        self.service = service
        self.started = False
        self.stopping = False

    def ready(self) -> tuple[bool, str]:
        if self.stopping:
            return False, "stopping"
        if not self.started:
            return False, "starting"
        nc = getattr(self.service, "nc", None)
        if nc is not None and not nc.is_connected:
            return False, "NATS disconnected"
        return True, "ready"
