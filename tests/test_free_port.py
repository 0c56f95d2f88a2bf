"""Ports for servers about to start (services/embedded_nats.free_port): a stack gives each of
its processes a port before any of them binds, so no two calls may hand out the same one."""

from __future__ import annotations

import socket

from heddle.services.local.embedded_nats import LISTEN_PORTS, free_port


def test_ports_handed_out_together_are_distinct_free_and_below_the_ephemeral_range() -> None:
    # 500 draws from 12,768 ports would repeat one about ten times over if drawn blindly.
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    assert all(port in LISTEN_PORTS for port in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # and free: nothing listens on it
