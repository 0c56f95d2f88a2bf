"""Faults on purpose: real services, runners and brokers SIGKILLed, frozen with SIGSTOP or
stopped mid-step, several at once (chaos), and what every run still does. `pytest -m fault`
(which also selects the few fault cases kept beside their subject in tests/integration)."""
