"""The heartbeat watchdog: finds attempts whose runner went silent.

Silence is measured on this process's monotonic clock from the moment a heartbeat was
*received* through the KV watch, so no wall clock (runner's, orchestrator's or server's)
takes part in a verdict, and clock skew between pods cannot fail a healthy step. The time
the server stored the heartbeat is kept for display (``lastHeartbeatAt``).

While this process is disconnected from NATS, no verdict is given; after it reconnects every
attempt gets a full grace to be heard from again: an outage is not a death.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from heddle.services.orchestrator.messages import Silent
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import Heartbeat

# A runner that stops reporting a running step is given this much beyond its timeout and
# kill grace before the orchestrator's own deadline fails the attempt.
DEADLINE_SLACK = 5.0


@dataclass(slots=True)
class Beat:
    attempt: int
    runner: str
    received: float  # monotonic
    stored_at: float  # epoch seconds, server time


class HeartbeatView:
    def __init__(self, silence_limit: float, kill_grace: float) -> None:
        self.silence_limit = silence_limit
        self.kill_grace = kill_grace
        self.beats: dict[str, dict[str, Beat]] = {}  # run -> step -> latest beat
        self.given: dict[str, set[tuple[str, int]]] = {}  # run -> (step, attempt) judged
        self.grace_from = time.monotonic()
        self.connected = True

    def record(self, hb: Heartbeat, stored_at: float, now: float | None = None) -> Beat:
        beat = Beat(hb.attempt, hb.runner, time.monotonic() if now is None else now, stored_at)
        self.beats.setdefault(hb.run_id, {})[hb.step_id] = beat
        return beat

    def forget_run(self, run_id: str) -> None:
        self.beats.pop(run_id, None)
        self.given.pop(run_id, None)

    def give(self, run_id: str, step_id: str, attempt: int) -> bool:
        """Record a verdict on the attempt; False if it had one already."""
        given = self.given.setdefault(run_id, set())
        if (step_id, attempt) in given:
            return False
        given.add((step_id, attempt))
        return True

    def withdraw(self, run_id: str, step_id: str, attempt: int) -> None:
        """The verdict was not delivered (its outcome could not be read): judge it again."""
        self.given.get(run_id, set()).discard((step_id, attempt))

    def disconnected(self) -> None:
        self.connected = False

    def reconnected(self, now: float | None = None) -> None:
        self.connected = True
        self.grace_from = time.monotonic() if now is None else now

    def verdicts(
        self, state: RunState, running_since: dict[str, float], now: float | None = None
    ) -> list[Silent]:
        """Silent verdicts for one run's attempts, each given at most once (``withdraw``
        one to have it judged again)."""
        if not self.connected:
            return []
        now = time.monotonic() if now is None else now
        run_id = state.run.run_id
        already = self.given.setdefault(run_id, set())
        out: list[Silent] = []
        for step_id, since in running_since.items():
            step = state.steps[step_id]
            out.extend(
                self._judge(
                    run_id,
                    step_id,
                    step.attempt,
                    step.runner,
                    since,
                    step.timeout_seconds,
                    now,
                    already,
                )
            )
        beats = self.beats.get(run_id, {})
        for step_id, beat in beats.items():
            # Taken but never reported started: only the runner running an attempt writes its
            # heartbeats, so a queued attempt with a heartbeat is held by that runner.
            if step_id in running_since:
                continue
            queued = state.steps.get(step_id)
            if queued is not None and queued.status == "queued" and queued.attempt == beat.attempt:
                out.extend(
                    self._judge(
                        run_id,
                        step_id,
                        queued.attempt,
                        beat.runner,
                        beat.received,
                        queued.timeout_seconds,
                        now,
                        already,
                    )
                )
        return out

    def _judge(
        self,
        run_id: str,
        step_id: str,
        attempt: int,
        runner: str | None,
        since: float,
        timeout: float,
        now: float,
        already: set[tuple[str, int]],
    ) -> list[Silent]:
        if (step_id, attempt) in already:
            return []
        beat = self.beats.get(run_id, {}).get(step_id)
        heard = since
        if beat is not None and beat.attempt == attempt:
            heard = max(heard, beat.received)
            runner = runner or beat.runner
        heard = max(heard, self.grace_from)
        silent_for = now - heard
        if silent_for > self.silence_limit:
            already.add((step_id, attempt))
            return [
                Silent(
                    step_id,
                    attempt,
                    f"runner {runner or 'unknown'} silent for {math.floor(silent_for * 10) / 10} s",
                )
            ]
        running_for = now - max(since, self.grace_from)
        deadline = timeout + self.kill_grace + DEADLINE_SLACK
        if running_for > deadline:
            already.add((step_id, attempt))
            return [
                Silent(
                    step_id,
                    attempt,
                    f"timed out after {timeout:g} s (runner {runner} did not report)",
                )
            ]
        return []
