"""Tests against real processes: a nats-server (the `nats_server` fixture), whole stacks of
service processes (`stack`), gateway apps served over a real nats-server, the HTTP API, the
command line as a subprocess, `heddle up`. `pytest -m integration`."""
