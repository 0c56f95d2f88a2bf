"""How many threads the embedded nats-server's Go scheduler gets (HEDDLE_NATS_GOMAXPROCS):
services/local/embedded_nats.py, ``go_threads``. That `heddle up` starts it so:
tests/integration/test_up.py."""

from __future__ import annotations

import pytest
from heddle.services.local.embedded_nats import go_threads


@pytest.mark.parametrize(
    ("cpus", "threads"),
    [(1, 1), (2, 1), (3, 1), (4, 1), (7, 1), (8, 2), (16, 4), (64, 16)],
)
def test_by_default_a_quarter_of_the_cpus_and_at_least_one(cpus: int, threads: int) -> None:
    assert go_threads(0, cpus, {}) == threads


def test_a_gomaxprocs_of_the_environment_is_left_to_the_server() -> None:
    assert go_threads(0, 16, {"GOMAXPROCS": "6"}) == 0  # 0: nothing of Heddle's is set


@pytest.mark.parametrize("cpus", [1, 2, 64])
def test_the_setting_wins_over_the_machine_and_the_environment(cpus: int) -> None:
    assert go_threads(3, cpus, {"GOMAXPROCS": "6"}) == 3
    assert go_threads(1, cpus, {}) == 1
