"""services/gateway/reads/progress.py: every step status has its place, a gate's waiting
among them, between pending and its end."""

from __future__ import annotations

from typing import get_args

from heddle.services.gateway.reads.progress import step_progress
from heddle.shared.wire.contracts import StepRecord, StepStatus


def at(status: str, attempt: int = 1) -> tuple[int, int, int]:
    return step_progress(StepRecord(id="s", status=status, attempt=attempt))  # type: ignore[arg-type]


def test_every_step_status_has_a_rank() -> None:
    for status in get_args(StepStatus):
        assert at(status) >= at("pending")


def test_a_gate_waiting_is_past_pending_and_before_its_end() -> None:
    assert at("pending") < at("waiting") < at("succeeded") == at("failed")
