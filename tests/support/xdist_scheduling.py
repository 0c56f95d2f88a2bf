"""How ``make test`` shares the suite out among its xdist workers (registered by
tests/conftest.py when xdist runs it).

xdist's ``load`` hands each worker a first block of tests in collection order: the fault
tests, few but a third of the suite's time, would fall into one worker's block and leave the
others idle for half the run. Here every test is a unit of work of its own, given to
whichever worker is free, save the fault tests: they are one unit, first in line, so one
worker runs them one at a time, as their bounds were set for (no other kills and restarts
at once on a two-core machine)."""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import Producer

FAULT = "tests/fault/"


class FaultTestsTogether(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        return FAULT if nodeid.startswith(FAULT) else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadScopeScheduling | None:
    """The scheduling of ``--dist load`` (``-n`` alone); xdist's own for any other."""
    if config.getvalue("dist") == "load":
        return FaultTestsTogether(config, log)
    return None
