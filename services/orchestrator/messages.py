"""What a run's actor is told, besides the runners' events: each message is one input of the
state machine (``RunActor._decide``), and ``Mailboxes`` is how the orchestrator's parts post
one to a run by its id (``LiveRuns``, live_runs.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from heddle.services.orchestrator.decisions import Effect
from heddle.services.orchestrator.state import HandoffAnswer
from heddle.shared.wire.contracts import ApprovalDecision, ChildEnded, StepFinished, StepStarted

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Msg


@dataclass(frozen=True, slots=True)
class Silent:
    """The watchdog's verdict on one attempt."""

    step_id: str
    attempt: int
    reason: str


@dataclass(frozen=True, slots=True)
class NoRunner:
    """No registered runner has the labels a queued attempt asks for, and none has for
    HEDDLE_NO_RUNNER_TIMEOUT (services/orchestrator/no_runner.py)."""

    step_id: str
    attempt: int
    reason: str


@dataclass(frozen=True, slots=True)
class Heard:
    """A heartbeat of the attempt's own runner, as the server stored it (``stored_at``,
    shown as the step's last heartbeat)."""

    step_id: str
    attempt: int
    runner: str
    stored_at: str | None


@dataclass(frozen=True, slots=True)
class Lost:
    """The backstop's finding on one queued attempt (services/orchestrator/backstop.py)."""

    step_id: str
    attempt: int
    requeue: int  # the attempt's requeues when it was found lost


@dataclass(frozen=True, slots=True)
class RetryTimer:
    step_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Cancel:
    # Why, for a run cancelled to free its concurrency key (CancelRun.reason): a first
    # cancel only, never one that stops the exit handlers too.
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class DeadlineTimer:
    """The run's deadline has come (its server schedule, or the local timer)."""


@dataclass(frozen=True, slots=True)
class Admit:
    """A waiting run's turn to be under way (admission.py)."""


@dataclass(frozen=True, slots=True)
class HandedOff:
    """What the runner a queued attempt was handed to answered (handoff.py)."""

    step_id: str
    attempt: int
    requeue: int
    runner: str
    answer: HandoffAnswer


@dataclass(frozen=True, slots=True)
class SlotsTaken:
    """What taking a step's slots came to (services/orchestrator/slots.py): every one held
    (``waiting_for`` None), or the semaphore the step waits for."""

    step_id: str
    attempt: int
    waiting_for: str | None


@dataclass(frozen=True, slots=True)
class SlotFree:
    """A slot of the semaphore a step waits for is free, and its turn has come."""

    step_id: str


@dataclass(frozen=True, slots=True)
class KeyTaken:
    """What taking the run's concurrency key came to (services/orchestrator/keys.py): held
    (and, ``admitted``, under way at once), or not (``holder`` holds it): queued, or
    ``refused``; ``quota``: the answer for its namespace's runs-under-way quota."""

    holds: bool
    holder: str | None = None
    refused: bool = False
    admitted: bool = False
    quota: bool = False


@dataclass(frozen=True, slots=True)
class KeyFree:
    """A slot of the concurrency key the run is queued for is free, and its turn has come."""


@dataclass(frozen=True, slots=True)
class GateDecided:
    """An approval gate's answer: the gateway's DecideApproval, or the answer found on its
    record in heddle-approvals (gate_look.py) if that command was lost."""

    step_id: str
    attempt: int
    decision: ApprovalDecision


@dataclass(frozen=True, slots=True)
class Create:
    """A new run's first message: store it, then announce it (the gateway waits for that)."""

    effects: list[Effect]
    announce: Callable[[str], Awaitable[None]]
    exists: Callable[[str], Awaitable[bool]]


Message = (
    StepStarted
    | StepFinished
    | Silent
    | NoRunner
    | Lost
    | Heard
    | RetryTimer
    | DeadlineTimer
    | Cancel
    | Admit
    | HandedOff
    | SlotsTaken
    | SlotFree
    | KeyTaken
    | KeyFree
    | ChildEnded  # a call step's child run ended (the command itself)
    | GateDecided
    | Create
)


class Mailboxes(Protocol):
    """The live runs' actors, by run id: a message for a run not live here (ended, or
    another orchestrator's) goes nowhere."""

    def post(self, run_id: str, message: Message, msg: Msg | None = None) -> bool:
        """To the run's actor now, which settles ``msg`` once its effects are stored; False
        if the run has no actor here."""
        ...

    def post_at(self, run_id: str, message: Message, at: float) -> None:
        """To the run's actor at ``at`` (epoch seconds), if it is live here then."""
        ...


class KeyHolders(Mailboxes, Protocol):
    """The live runs, and the places among the runs under way that a run holding its
    concurrency key takes (``LiveRuns.key_held``)."""

    def key_held(self, run_id: str, priority: int) -> bool:
        """A run live here has just taken its key: under way now (True), or waiting its
        turn (False)."""
        ...
