"""Pure tests: the code's own functions and classes called directly, with no nats-server, no
service process, no subprocess and no network. Folders mirror the code's packages. Run alone
with `make test-unit` (or `pytest -m unit`)."""
