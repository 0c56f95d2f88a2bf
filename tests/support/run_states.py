"""A run's state machine driven by hand (services/orchestrator/state.py, no I/O): a run made
from a list of steps, and the events a test feeds it, each at its own moment after T0."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import msgspec
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.wire.contracts import StepFinished, StepSpec, StepStarted, SubmitRun
from heddle.shared.wire.timefmt import from_epoch

T0 = 1_700_000_000.0
RUN = "run-1"
POLICY = Policy(retry_base=1.0, retry_cap=300.0, default_timeout=900.0)
Event = Callable[[RunState], list]


def make(
    steps: list[tuple[str, list[str], int]],
    rand: float = 0.5,
    policy: Policy = POLICY,
    timeout: float | None = None,
) -> tuple[RunState, list]:
    """The run of ``steps`` (id, dependencies, retries), made at T0; ``timeout``: the
    workflow's timeoutSeconds, its deadline T0 + that."""
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[
            StepSpec(id=s, command=f"echo {s}", depends_on=deps, retries=r) for s, deps, r in steps
        ],
        timeout_seconds=timeout,
    )
    return made(cmd, policy, rand=rand)


def made(
    cmd: SubmitRun,
    policy: Policy = POLICY,
    rand: float = 0.5,
    admitted: bool = True,
    runs_quota: bool = False,
) -> tuple[RunState, list]:
    """The run ``cmd`` submits, made at T0 with a fixed jitter and numbered tickets."""
    counter = itertools.count(1)
    return RunState.new(
        cmd,
        policy,
        T0,
        rand=lambda: rand,
        tickets=lambda: f"ticket-{next(counter)}",
        admitted=admitted,
        runs_quota=runs_quota,
    )


def holding(state: RunState, step: str, ticket: str | None) -> str:
    """The ticket an event carries: the attempt's own (from its runner) unless given."""
    if ticket is not None:
        return ticket
    return state.steps[step].ticket if step in state.steps else ""


def started(
    step: str = "a", attempt: int = 1, runner: str = "r1", ticket: str | None = None
) -> Event:
    def on(s: RunState) -> list:
        ev = StepStarted(
            run_id=RUN,
            step_id=step,
            attempt=attempt,
            runner=runner,
            ticket=holding(s, step, ticket),
            pid=42,
            started_at=from_epoch(T0 + 1),
        )
        return s.on_started(ev, T0 + 1)

    return on


def finished(
    step: str = "a",
    outcome: str = "succeeded",
    attempt: int = 1,
    runner: str = "r1",
    ticket: str | None = None,
) -> Event:
    def on(s: RunState) -> list:
        ev = StepFinished(
            run_id=RUN,
            step_id=step,
            attempt=attempt,
            runner=runner,
            ticket=holding(s, step, ticket),
            outcome=outcome,  # type: ignore[arg-type]
            finished_at=from_epoch(T0 + 2),
            exit_code=0 if outcome == "succeeded" else 1,
        )
        return s.on_finished(ev, T0 + 2)

    return on


def retry_due(step: str = "a", attempt: int = 2) -> Event:
    return lambda s: s.on_retry_due(step, attempt, T0 + 3)


def silent(step: str = "a", attempt: int = 1) -> Event:
    return lambda s: s.on_silent(step, attempt, "runner went silent", T0 + 4)


def lost(step: str = "a", attempt: int = 1, requeue: int = 0) -> Event:
    return lambda s: s.on_lost(step, attempt, requeue, T0 + 6)


def accepted(step: str = "a", attempt: int = 1, runner: str = "r1") -> Event:
    return lambda s: s.on_accepted(step, attempt, runner) or []


def cancel(s: RunState) -> list:
    return s.cancel(T0 + 5)


def spec(sid: str, deps: tuple[str, ...] = (), **fields: Any) -> StepSpec:
    """A step of a workflow document, its command naming it."""
    return StepSpec(id=sid, command=f"echo {sid}", depends_on=list(deps), **fields)


def finish_step(
    state: RunState, sid: str, outcome: str = "succeeded", outputs: dict[str, str] | None = None
) -> list:
    """The step's current attempt started and ended as ``outcome`` (its runner's reports)."""
    started(sid)(state)
    ev = StepFinished(
        run_id=RUN,
        step_id=sid,
        attempt=state.steps[sid].attempt,
        runner="r1",
        ticket=state.steps[sid].ticket,
        outcome=outcome,  # type: ignore[arg-type]
        finished_at=from_epoch(T0 + 2),
        exit_code=0 if outcome == "succeeded" else 1,
        outputs=outputs or {},
    )
    return state.on_finished(ev, T0 + 2)


def statuses(state: RunState) -> dict[str, str]:
    """Each step's status, by id."""
    return {sid: s.status for sid, s in state.steps.items()}


def rebuilt(state: RunState, policy: Policy = POLICY) -> RunState:
    """The run as another orchestrator reads it back from its stored records."""
    run = msgspec.json.decode(msgspec.json.encode(state.run), type=type(state.run))
    steps = [
        msgspec.json.decode(msgspec.json.encode(s), type=type(s)) for s in state.steps.values()
    ]
    return RunState(run, steps, policy)
