"""The floor's arithmetic (bench/floor.py): each part's processes charged to the service
that does that work in Heddle, and what the fan-out target leaves Heddle's processes."""

from __future__ import annotations

from typing import Any

import pytest

from bench.floor import TARGET, allowed, by_service

PARTS = {
    "spawn": {"spawn": 0.2, "launchers": 0.25, "commands": 0.6, "nats-server": 0.0},
    "outcome": {"publish": 0.05, "consume": 0.02, "nats-server": 0.04},
    "ready": {"publish": 0.01, "consume": 0.02, "nats-server": 0.02},
    "records": {"put": 0.01, "nats-server": 0.015},
    "core": {"send": 0.004, "hear": 0.003, "nats-server": 0.004},
}


def test_each_part_is_charged_to_the_services_that_do_it_as_often_as_a_step_needs_it() -> None:
    floor = by_service(PARTS)
    assert floor == pytest.approx(
        {
            "runners": 0.2 + 0.05 + 0.003,  # the spawn, the outcome's publish, the offer heard
            "launchers": 0.25,
            "orchestrator": 0.02 + 0.01 + 2 * 0.01,  # outcome taken, ready sent, two records
            "dispatcher": 0.02 + 0.004 + 0.003,  # ready taken, offer sent, live copy heard
            # a core message's server share covers its send and its delivery: half for a
            # live copy, which rides on the outcome's publish
            "nats-server": 0.0 + 0.04 + 0.02 + 2 * 0.015 + 0.004 + 0.002,
        }
    )
    assert "commands" not in floor  # the command's CPU is the baseline's as well


def test_the_target_leaves_the_cores_time_per_step_less_the_commands_own() -> None:
    result: dict[str, Any] = {"parts": PARTS, "baseline": {"steps_per_s": 2000.0}, "cores": 2}
    per_step_ms = 2 / (TARGET * 2000.0) * 1000
    assert allowed(result) == pytest.approx(per_step_ms - 0.6)
    slower: dict[str, Any] = {**result, "baseline": {"steps_per_s": 1000.0}}
    assert allowed(slower) > allowed(result)
