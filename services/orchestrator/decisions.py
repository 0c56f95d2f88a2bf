"""What the state machine decides: the effects of one message, for the run actor to carry
out in order (``effects.py`` does the I/O). Plain values: no I/O, no clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.shared.core.namespaces import namespace_of
from heddle.shared.core.notify_plan import due_notifications
from heddle.shared.core.quotas import runs_key
from heddle.shared.wire.contracts import (
    TERMINAL_RUN,
    TERMINAL_STEP,
    ApprovalGate,
    ChildEnded,
    Notification,
    OnLimit,
    RunRecord,
    RunStatus,
    StepReady,
    StepRecord,
    StepStatus,
    WorkflowCall,
)


@dataclass(frozen=True, slots=True)
class PersistStep:
    step: StepRecord
    previous: str  # the status before, for the one log line per transition
    # The transition as it was when decided: the record itself may move on within the same
    # batch (it is written once, in its final state, but each transition is logged).
    status: StepStatus = field(default="pending", compare=False)  # set from ``step``
    attempt: int = field(default=0, compare=False)
    reason: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", self.step.status)
        object.__setattr__(self, "attempt", self.step.attempt)
        object.__setattr__(self, "reason", self.step.reason)


@dataclass(frozen=True, slots=True)
class PersistRun:
    run: RunRecord
    status: RunStatus = field(default="running", compare=False)  # as decided, for the log line
    cancel_requested: bool = field(default=False, compare=False)
    waiting: bool = field(default=False, compare=False)
    reason: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", self.run.status)
        object.__setattr__(self, "cancel_requested", self.run.cancel_requested)
        object.__setattr__(self, "waiting", self.run.waiting)
        object.__setattr__(self, "reason", self.run.reason)


@dataclass(frozen=True, slots=True)
class Enqueue:
    ready: StepReady
    # The runner to hand the attempt to directly, right after its queued record, rather
    # than through the dispatchers' stream (the runner whose success just readied it).
    handoff: str | None = None
    # A step with no dependencies: it opens its run, and the dispatchers serve the steps of
    # runs under way before it (docs/bursts.md, "Runs under way first").
    opens: bool = False


@dataclass(frozen=True, slots=True)
class AwaitHandoff:
    """A queued attempt handed to ``runner`` before a restart, its answer lost with the
    orchestrator: taken as unanswered once a runner would have answered."""

    step_id: str
    attempt: int
    requeue: int
    runner: str
    continued: bool = False  # a continuation the runner started (for the metric)


@dataclass(frozen=True, slots=True)
class Continue:
    """A continuation for ``runner``: the prepared attempt in ``ready`` (its ``after`` names
    the attempt it follows), run there as soon as that one succeeds. Sent after the batch's
    records, since the prepared step's record holds the attempt's ticket."""

    ready: StepReady
    runner: str


@dataclass(frozen=True, slots=True)
class ScheduleRetry:
    step_id: str
    attempt: int  # the attempt that will run when the timer fires
    at: float  # epoch seconds
    delay: float


@dataclass(frozen=True, slots=True)
class ScheduleDeadline:
    """The run's deadline timer: a server schedule (durable, one per run, apart from the
    steps' retry timers) and a local timer, as a retry's; ``durable`` False for the local
    one alone (a timer that came early: the server's has fired already)."""

    at: float  # epoch seconds
    delay: float
    durable: bool = True


@dataclass(frozen=True, slots=True)
class KillAttempt:
    """Tell a runner to kill one attempt's process group (cancel, or fencing a dead attempt)."""

    runner: str
    step_id: str
    attempt: int
    reason: str
    # The attempt's ticket, which the runner asks of a cancel (CancelAttempt.ticket). A
    # credential, not part of what is decided: left out of comparisons and of repr (logs).
    ticket: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Requeued:
    """An attempt queued again because no runner holds it and its ready message is gone
    (services/orchestrator/backstop.py): for the log line and the step's log note."""

    step_id: str
    attempt: int
    requeue: int


@dataclass(frozen=True, slots=True)
class TakeSlots:
    """Take a slot of each of ``names`` (in name order) for the step's next attempt, once
    its waiting record is stored; the answer comes back to the run as a message: every slot
    held, or the semaphore it waits for (docs/pools.md, "Semaphores")."""

    step_id: str
    attempt: int
    names: tuple[str, ...]
    since: str


@dataclass(frozen=True, slots=True)
class GiveBack:
    """The step's slots (and its places in line) given back, once its record is stored."""

    step_id: str
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TakeKey:
    """Take the run's concurrency key, once its waiting record is stored; the answer comes
    back to the run as a message: held, queued, or refused (docs/pools.md, "Concurrency
    limits"). ``priority`` places a run that holds it among the runs waiting their turn,
    when holding it is the last the run waits for (``admits``). A ``quota`` is the run's
    namespace's runs-under-way quota: ``key`` is its document's name (quotas.runs_key), and
    its limit the quota as the orchestrator knows it, not ``limit``."""

    key: str
    limit: int
    on_limit: OnLimit
    priority: int
    quota: bool = False
    admits: bool = True


@dataclass(frozen=True, slots=True)
class LeaveKey:
    """The run's concurrency key given back (or its place in the key's queue), once the
    record of its end is stored; a ``quota`` as ``TakeKey``'s."""

    key: str
    quota: bool = False


@dataclass(frozen=True, slots=True)
class StartChild:
    """A call step's attempt starts its child run (docs/sub-workflows.md): the workflow it
    calls read from the registry, its submit sent, once the step's record is stored; a
    workflow or version gone ends the step as a failed child would."""

    step_id: str
    attempt: int
    child_run: str
    call: WorkflowCall
    depth: int  # the child's call depth
    # Sent again by a rebuilt run: nothing to do if the child is stored already (the
    # workflow it calls may have changed since it started).
    again: bool = False


@dataclass(frozen=True, slots=True)
class CancelChild:
    """The child run of a call step its run stopped, cancelled in turn."""

    child_run: str


@dataclass(frozen=True, slots=True)
class TellParent:
    """A child run's end, sent to its parent's command subject before the record of that
    end: a crash between leaves the child to end again and send it again (one message id)."""

    ended: ChildEnded


@dataclass(frozen=True, slots=True)
class CreateNotifications:
    """The deliveries of a run's end to its notify targets, created (never replaced) in the
    pass that stores its end; the gateways send them (docs/notifications.md)."""

    records: tuple[Notification, ...]


@dataclass(frozen=True, slots=True)
class OpenGate:
    """An approval gate's record written to heddle-approvals, after its step's record: what
    the gateway lists and answers (docs/approvals.md)."""

    gate: ApprovalGate


@dataclass(frozen=True, slots=True)
class CloseGate:
    """A gate that ended (answered, timed out, cancelled): its record deleted, after its
    step's record, so only gates waiting are listed."""

    step_id: str


@dataclass(frozen=True, slots=True)
class Ignored:
    step_id: str
    reason: str


Effect = (
    PersistStep
    | PersistRun
    | Enqueue
    | AwaitHandoff
    | Continue
    | ScheduleRetry
    | ScheduleDeadline
    | KillAttempt
    | Requeued
    | TakeSlots
    | GiveBack
    | TakeKey
    | LeaveKey
    | StartChild
    | CancelChild
    | TellParent
    | CreateNotifications
    | OpenGate
    | CloseGate
    | Ignored
)


def giving_back(effects: list[Effect]) -> list[Effect]:
    """``effects`` with the slots of each step they end (or send to wait out a backoff)
    given back right after its record, and the concurrency key of a run they end right
    after the run's, and its notifications: however it ends, in one place. Giving back
    what a step or a run does not hold changes nothing, so one that never took is
    harmless. So is an approval gate's record closed, however the gate ends."""
    out: list[Effect] = []
    for eff in effects:
        out.append(eff)
        if isinstance(eff, PersistRun) and eff.status in TERMINAL_RUN:
            out.extend(leaving(eff.run))
            if records := due_notifications(eff.run):
                out.append(CreateNotifications(tuple(records)))
        elif isinstance(eff, PersistStep) and eff.previous == "waiting" and eff.status != "waiting":
            out.append(CloseGate(eff.step.id))
        elif (
            isinstance(eff, PersistStep)
            and eff.step.semaphores
            and eff.step.for_each is None  # it runs as its instances, which take their own
            and (eff.status in TERMINAL_STEP or eff.status == "retrying")
            and eff.previous != "new"
        ):
            out.append(GiveBack(eff.step.id, tuple(sorted(eff.step.semaphores))))
    return out


def leaving(run: RunRecord) -> list[Effect]:
    """The keys a run gives back when it ends: its own concurrency key, then its
    namespace's runs-under-way quota, if it takes them."""
    out: list[Effect] = []
    if run.concurrency_key is not None:
        out.append(LeaveKey(run.concurrency_key))
    if run.runs_quota:
        out.append(LeaveKey(runs_key(namespace_of(run.run_id)), quota=True))
    return out
