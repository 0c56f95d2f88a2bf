"""What every attempt of one runner shares, made once by the runner agent (app.py).

Its own module so that the parts of an attempt (attempt.py, which runs the command;
first_report.py, which answers and announces it; outcome_report.py, which reports how it
ended) take it without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from heddle.services.runner_agent.isolation import StepUser
from heddle.services.runner_agent.launcher import Launcher
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.runtime.settings import Settings

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client, JetStreamContext


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """What every attempt of one runner shares."""

    runner: str
    nc: Client
    js: JetStreamContext
    acked: AckedPublisher
    settings: Settings
    base_env: dict[str, str]  # credentials already removed (isolation.step_base_env)
    heartbeat_ttl: int
    run_as: StepUser | None = None  # where the runner can switch users
    launcher: Launcher | None = None  # spawns the steps as run_as
