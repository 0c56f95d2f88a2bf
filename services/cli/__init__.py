"""The `heddle` command line: ``main.main`` runs it (``python -m heddle.services.cli``); the
client side (``commands``, ``watch``, ``logs``, ...) talks to the gateway's HTTP API, and
``token_cli`` and ``nats_users_cli`` make a deployment's secrets."""
