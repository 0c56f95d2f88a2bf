"""The floor's arithmetic (bench/floor.py): each part's processes charged to the service
that does that work in Heddle, and what the fan-out target leaves Heddle's processes."""

from __future__ import annotations

from typing import Any

import pytest

from bench.floor import TARGET, allowed, by_service

PARTS = {
    "spawn": {"spawn": 0.2, "launchers": 0.25, "commands": 0.6, "nats-server": 0.001},
    "outcome": {"publish": 0.08, "consume": 0.03, "hear": 0.013, "nats-server": 0.11},
    "ready": {"publish": 0.015, "consume": 0.02, "nats-server": 0.03},
    "records": {"put": 0.012, "nats-server": 0.018},
    "offer": {"send": 0.002, "hear": 0.007, "nats-server": 0.005},
}


def test_each_part_is_charged_to_the_services_that_do_it_as_often_as_a_step_needs_it() -> None:
    floor = by_service(PARTS)
    assert floor == pytest.approx(
        {
            "runners": 0.2 + 0.08 + 0.007,  # the spawn, the outcome's publish, the offer heard
            "launchers": 0.25,
            "orchestrator": 0.03 + 0.015 + 2 * 0.012,  # outcome taken, ready sent, two records
            "dispatcher": 0.013 + 0.02 + 0.002,  # live copy heard, ready taken, offer sent
            "nats-server": 0.001 + 0.11 + 0.03 + 2 * 0.018 + 0.005,
        }
    )
    assert "commands" not in floor  # the command's CPU is the baseline's as well


def test_the_target_leaves_the_cores_time_per_step_less_the_commands_own() -> None:
    result: dict[str, Any] = {"parts": PARTS, "baseline": {"steps_per_s": 2000.0}, "cores": 2}
    per_step_ms = 2 / (TARGET * 2000.0) * 1000
    assert allowed(result) == pytest.approx(per_step_ms - 0.6)
    slower: dict[str, Any] = {**result, "baseline": {"steps_per_s": 1000.0}}
    assert allowed(slower) > allowed(result)
