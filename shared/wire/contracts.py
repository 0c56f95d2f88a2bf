"""Every message and record that crosses a process boundary, as msgspec structs.

JSON on the wire with camelCase names, so `nats sub` and `nats kv get` show what the HTTP API
shows. Receivers ignore fields they do not know; new fields are optional, so old and new
services can talk during an upgrade. Encoders and decoders are built once per process.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

StepStatus = Literal[
    "pending",
    "queued",
    "running",
    "retrying",
    "succeeded",
    "failed",
    "skipped",
    "cancelled",
    "waiting",  # an approval gate, holding no runner, until it is answered or times out
]
RunStatus = Literal["running", "succeeded", "failed", "cancelled"]
TERMINAL_STEP: frozenset[StepStatus] = frozenset({"succeeded", "failed", "skipped", "cancelled"})
TERMINAL_RUN: frozenset[RunStatus] = frozenset({"succeeded", "failed", "cancelled"})


class Wire(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """Base of every wire struct: camelCase JSON, defaults left out to keep payloads small."""


class FrozenWire(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True, frozen=True):
    """``Wire``, immutable: the base of the messages, which no one changes once made (a
    frozen struct cannot derive from a mutable one)."""


# ---- documents users write (HTTP) -------------------------------------------------------


class Approval(Wire, forbid_unknown_fields=True):
    """A step that is a gate (docs/approvals.md): it waits, holding no runner, until an
    operator approves it (it succeeds) or rejects it, or ``timeout_seconds`` pass (it fails)."""

    message: str
    timeout_seconds: float | None = None  # none: it waits as long as its run does


class WorkflowCall(Wire, forbid_unknown_fields=True):
    """A step that runs a registered workflow as its child run (docs/sub-workflows.md) and
    ends as the child ends; ``version`` none: the newest when the step starts."""

    name: str
    version: int | None = None
    params: dict[str, str] = {}


class StepSpec(Wire, forbid_unknown_fields=True):
    id: str
    # Exactly one of command, approval and workflow (shared/core/step_checks.py).
    command: str = ""
    depends_on: list[str] = []
    retries: int = 0
    timeout_seconds: float | None = None
    env: dict[str, str] = {}  # static variables; over the workflow's (shared/core/step_env.py)
    # A CEL condition (shared/core/expressions.py), decided once every dependency has ended,
    # whatever its outcome: false skips the step. Without it, every dependency must succeed.
    when: str | None = None
    allow_failure: bool = False  # its failure does not fail the run
    # A CEL expression giving a list (or a string holding a JSON array): the step runs once
    # per item, as instances ``<id>[0]``, ``<id>[1]``... (services/orchestrator/loops.py).
    for_each: str | None = None
    max_parallel: int | None = None  # the most instances queued or running at once
    # Runner labels the step needs: only a runner with every one takes it; none, the default
    # pool's runners (docs/pools.md).
    runs_on: list[str] = []
    # Semaphores the step holds a slot of while it runs (docs/pools.md, "Semaphores").
    semaphores: list[str] = []
    approval: Approval | None = None
    workflow: WorkflowCall | None = None


class Webhook(Wire, forbid_unknown_fields=True):
    """A registered workflow's webhook trigger (docs/webhooks.md): a delivery to
    ``POST /hooks/{workflow}/{name}``, signed with the hook's secret, starts a run whose
    parameters are ``params``' CEL expressions over the delivery's ``body`` and ``headers``."""

    name: str
    params: dict[str, str] = {}


NotifyOn = Literal["succeeded", "failed", "cancelled"]


class Notify(Wire, forbid_unknown_fields=True):
    """Where a run's end is POSTed when it ends in one of ``on`` (docs/notifications.md);
    ``secret``: signed with the secret made for it, as a webhook delivery is."""

    url: str
    on: list[NotifyOn] = msgspec.field(default_factory=lambda: ["failed", "cancelled"])
    secret: bool = False


class ParamSpec(Wire, forbid_unknown_fields=True):
    """A parameter a workflow declares: a run gives it a value, or it takes the default (one
    with no default must be given). Steps get it as ``HEDDLE_PARAM_<NAME>``."""

    name: str
    default: str | None = None
    description: str | None = None


MIN_PRIORITY = -1000  # a run's priority, from these bounds (0 by default)
MAX_PRIORITY = 1000
MAX_CONCURRENCY_LIMIT = 1000  # runs holding one concurrency key at once, at most
OnLimit = Literal["queue", "cancelRunning", "refuse"]


class Concurrency(Wire, forbid_unknown_fields=True):
    """A workflow's concurrency limit (docs/pools.md, "Concurrency limits"): at most
    ``limit`` runs with the same key at once; ``key`` is a CEL expression over ``params``
    and ``workflow``, evaluated once at submit (shared/core/concurrency.py)."""

    key: str
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_CONCURRENCY_LIMIT)] = 1
    on_limit: OnLimit = "queue"


class _Workflow(Wire, forbid_unknown_fields=True):
    """The fields a workflow document and a run request share, in their order on the wire."""

    steps: list[StepSpec]
    name: str | None = None
    schedule: str | None = None
    timezone: str | None = None
    catchup: bool = True
    description: str | None = None
    # Exit handlers: steps run once every other step has ended, however the run went.
    on_exit: list[StepSpec] = []
    # The run's deadline, from its creation: past it every step still going is killed or
    # cancelled and the run fails (docs/workflows.md, "Run deadlines").
    timeout_seconds: float | None = None
    # Higher goes first: a waiting run's turn, and its steps among those a dispatcher holds
    # (docs/workflows.md, "Priority"; checked by shared/core/priority.py).
    priority: Annotated[int, msgspec.Meta(ge=MIN_PRIORITY, le=MAX_PRIORITY)] = 0
    # At most ``limit`` runs of one key at once; what a run beyond does (docs/pools.md).
    concurrency: Concurrency | None = None
    # The namespace it is registered or run in (docs/namespaces.md); the gateway keeps it in
    # the stored name instead, so a stored spec has none.
    namespace: str | None = None
    # Where the run's end is POSTed (docs/notifications.md).
    notify: list[Notify] = []
    # A registered workflow's webhook triggers (docs/webhooks.md); a run's own document
    # may not have them (shared/core/validation.py).
    webhooks: list[Webhook] = []


class WorkflowSpec(_Workflow, forbid_unknown_fields=True):
    params: list[ParamSpec] = []
    env: dict[str, str] = {}  # static variables of every step


class RunRequest(_Workflow, forbid_unknown_fields=True):
    """Body of POST /api/runs: an inline workflow, optionally with a client-chosen run id.
    Its ``params`` are the run's values (an object), or declarations as a workflow document
    has them (a list), each then taking its default."""

    params: list[ParamSpec] | dict[str, str] = []
    env: dict[str, str] = {}  # static variables of every step
    run_id: str | None = None
    workflow_id: str | None = None  # the older route's name for runId


# ---- commands (HEDDLE_CMD) ------------------------------------------------------------


class Command(FrozenWire, tag_field="type", frozen=True):
    pass


class DocumentRef(FrozenWire, frozen=True):
    """A document carried beside its command (``shared/broker/documents.py``): the chunks stored
    on ``subject`` in HEDDLE_DOCS at ``seqs``, in order, ``size`` bytes in all."""

    subject: str
    seqs: list[int]
    size: int
    sha256: str


class SubmitRun(Command, tag="submit", frozen=True):
    run_id: str
    steps: list[StepSpec]
    submitted_at: str
    workflow_name: str | None = None
    version: int | None = None
    trigger: str = "api"
    scheduled_for: str | None = None
    scheduled_tz: str | None = None  # the schedule's timezone (HEDDLE_SCHEDULED_TZ)
    params: dict[str, str] = {}  # the run's parameter values, defaults applied
    env: dict[str, str] = {}  # the workflow's static variables
    on_exit: list[StepSpec] = []  # the workflow's exit handlers
    # A retry of a failed or cancelled run (POST /api/runs/{run}/retry): the run it retries,
    # and its steps that succeeded, each with its succeeded attempt (outputs included),
    # carried over as succeeded: they do not run again.
    retry_of: str | None = None
    carried: dict[str, AttemptRecord] = {}
    timeout_seconds: float | None = None  # the workflow's: the run's deadline, from its creation
    priority: int = 0  # the run's: a trigger's, else its workflow's (docs/workflows.md)
    # The run's concurrency key, evaluated from its workflow's ``concurrency.key`` when it
    # was submitted, that key's limit, and what the run does at the limit (docs/pools.md).
    concurrency_key: str | None = None
    concurrency_limit: int = 1
    on_limit: OnLimit = "queue"
    notify: list[Notify] = []  # the workflow's (docs/notifications.md)
    # A child run (docs/sub-workflows.md): the run and step that started it, and how deep
    # it is in calls (a run no step started: 0).
    parent_run: str | None = None
    parent_step: str | None = None
    call_depth: int = 0
    # A submit too large for one message: this command carries the run id alone, and the
    # whole command (this field unset) is the document it names.
    document: DocumentRef | None = None


class CancelRun(Command, tag="cancel", frozen=True):
    run_id: str
    requested_at: str
    # Why, when the run is cancelled to free its concurrency key for another run
    # (``onLimit: cancelRunning``): the run's reason. Such a cancel is a first cancel only:
    # sent again, it does not stop the exit handlers too.
    reason: str | None = None


class RetryDue(Command, tag="timer", frozen=True):
    """Fired by the server's message scheduler when a step's backoff is over."""

    run_id: str
    step_id: str
    attempt: int


class DeadlineDue(Command, tag="deadline", frozen=True):
    """Fired by the server's message scheduler when a run's deadline (its creation plus its
    workflow's ``timeoutSeconds``) has come: its own schedule subject, so it never replaces
    a step's retry timer."""

    run_id: str
    deadline_at: str  # the run's, as its record holds it (for the log line)


class DecideApproval(Command, tag="approval", frozen=True):
    """An approval gate answered (docs/approvals.md): sent by the gateway once it has stored
    the decision on the gate's record (``heddle-approvals``), so only one answer is sent."""

    run_id: str
    step_id: str
    attempt: int
    approved: bool
    by: str  # the token's name
    decided_at: str
    comment: str = ""


class ChildEnded(Command, tag="child-ended", frozen=True):
    """A child run ended (docs/sub-workflows.md): sent by the child's orchestrator to its
    parent run, so the step that started it ends as it ended."""

    run_id: str  # the parent's
    step_id: str
    attempt: int
    child_run: str
    status: RunStatus
    ended_at: str
    # Every succeeded step's outputs, keyed ``<childstep>_<key>``.
    outputs: dict[str, str] = {}
    reason: str | None = None


AnyCommand = SubmitRun | CancelRun | RetryDue | DeadlineDue | DecideApproval | ChildEnded


# ---- work (HEDDLE_STEPS and a runner's assign subject) ---------------------------------


class StepReady(FrozenWire, frozen=True):
    run_id: str
    step_id: str
    attempt: int
    command: str
    timeout_seconds: float
    ready_at: str
    # How often this attempt was queued again because its assignment was lost with the
    # broker (services/orchestrator/backstop.py): part of the message id, nothing else.
    requeue: int = 0
    # The attempt's ticket: a random token only the orchestrator, the dispatcher and the
    # runner given the attempt know. Its events and heartbeats carry it back, so no other
    # runner can speak for the attempt (docs/security.md, "Security").
    ticket: str = ""
    # The step's own variables (parameters, slot, static env, upstream outputs:
    # shared/core/step_env.py), set after the runner's environment is stripped of HEDDLE_*.
    env: dict[str, str] = {}
    # Handed to a runner first, which gave no answer: a runner may hold it, so the
    # dispatcher looks for the attempt (its heartbeat, its outcome) before it offers it.
    check: bool = False
    # That runner (an orchestrator's handoff), which may hold the attempt: the dispatcher
    # asks it again before any other, while it is in the pool.
    held_by: str = ""
    # A continuation (docs/latency.md, "Continuing a chain"): run this attempt right
    # after attempt ``after_attempt`` of step ``after`` succeeds on the runner holding it,
    # if that one wrote no outputs. Empty: an offer to take now.
    after: str = ""
    after_attempt: int = 0
    after_ticket: str = ""  # that attempt's: the continuation follows it as it was given
    # This attempt's continuation, given with it to whichever runner a dispatcher gives it
    # (the orchestrator does not know that runner yet); one with ``after`` set has none.
    then: StepReady | None = None
    # The runner labels the step asks for (StepSpec.runs_on): a runner given it directly (a
    # handoff, a continuation) that lacks one refuses it (shared/core/labels.py).
    runs_on: tuple[str, ...] = ()
    # The run's priority (RunRecord.priority): a dispatcher takes higher first.
    priority: int = 0


class AssignReply(FrozenWire, frozen=True):
    accepted: bool
    runner: str
    reason: str | None = None
    jobs: int = 0  # assignments this runner has accepted so far, this one included


class CancelAttempt(FrozenWire, frozen=True):
    run_id: str
    step_id: str
    attempt: int
    reason: str
    # The attempt's (StepReady.ticket): its runner kills it only on a cancel that carries
    # it, so no one else who can reach the runner's subject can (docs/security.md).
    ticket: str = ""


# ---- lifecycle events from runners (HEDDLE_EVENTS) --------------------------------------


class StepEvent(FrozenWire, tag_field="type", frozen=True, kw_only=True):
    run_id: str
    step_id: str
    attempt: int
    runner: str
    ticket: str = ""  # the attempt's, from its assignment (StepReady.ticket)


class StepStarted(StepEvent, tag="started", frozen=True, kw_only=True):
    pid: int
    started_at: str


Outcome = Literal["succeeded", "failed", "timed_out", "cancelled"]


class StepFinished(StepEvent, tag="finished", frozen=True, kw_only=True):
    outcome: Outcome
    finished_at: str
    exit_code: int | None = None
    reason: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    # When and as which process the command started (None if it could not be started): a
    # step that ends within HEDDLE_STARTED_REPORT_DELAY has no started event to say so.
    started_at: str | None = None
    pid: int | None = None
    # What a succeeded attempt wrote to $HEDDLE_OUTPUTS (shared/core/outputs.py); never a
    # failed one's.
    outputs: dict[str, str] = {}
    # The step whose continuation (StepReady.after) this runner started at this success,
    # its attempt the one it was given, and that attempt's ticket: the runner holds it now.
    continued: str = ""
    continued_ticket: str = ""
    # The runner's accepted assignments once it took this attempt (AssignReply.jobs): an
    # offer answered by this outcome learns the count from it.
    jobs: int = 0


AnyStepEvent = StepStarted | StepFinished


# ---- KV values ------------------------------------------------------------------------


class Heartbeat(FrozenWire, frozen=True):
    runner: str
    run_id: str
    step_id: str
    attempt: int
    seq: int
    pid: int | None = None
    ticket: str = ""  # the attempt's, from its assignment (StepReady.ticket)


class RunnerInfo(Wire):
    name: str
    status: Literal["idle", "busy"]
    pid: int
    version: str
    started_at: str
    seen_at: str
    pod: str | None = None
    node: str | None = None
    run_id: str | None = None
    step_id: str | None = None
    attempt: int | None = None
    jobs: int = 0
    pool: str = "default"  # HEDDLE_RUNNER_POOL
    labels: list[str] = []  # its pool's name and HEDDLE_RUNNER_LABELS, sorted
    namespaces: list[str] = []  # HEDDLE_POOL_NAMESPACES: the only ones whose steps it takes


class NamespaceRecord(Wire):
    """A namespace as ``heddle-namespaces`` keeps it, by name (shared/core/namespaces.py):
    its quotas, None where it has none. ``default`` exists without a record."""

    name: str
    created_at: str = ""
    max_runs_under_way: int | None = None
    max_running_steps: int | None = None


class RunnerPod(Wire):
    """A runner pod as the orchestrator's pod watch last saw it (``heddle-pods/<pod>``, in a
    cluster only; services/orchestrator/pod_objects.py reads it off the API's pod object)."""

    name: str
    runner: str  # the runner it runs: its heddle/runner label, else the pod's name
    uid: str = ""
    phase: str = "Unknown"  # Pending, Running, Succeeded, Failed, Unknown
    node: str | None = None
    ready: bool = False
    restarts: int = 0
    # Why it is not running, when it is not: Terminating, CrashLoopBackOff, Evicted ...
    reason: str | None = None
    last_termination: str | None = None  # the runner container's, e.g. "OOMKilled (exit 137)"
    seen_at: str = ""


class SemaphoreHolder(Wire):
    """A step holding a slot of a semaphore (its attempt when it took it), or waiting for
    one (attempt 0)."""

    run_id: str
    step_id: str
    attempt: int = 0
    since: str = ""


class Semaphore(Wire):
    """``<name>`` in heddle-semaphores: its size, the steps holding its slots and those
    waiting for one, in order of waiting (shared/core/semaphores.py decides every change)."""

    size: int = 1
    holders: list[SemaphoreHolder] = []
    waiting: list[SemaphoreHolder] = []


class KeyCancel(Wire):
    """A run cancelled to make room for another (``by``) under ``onLimit: cancelRunning``."""

    run_id: str
    by: str


class ConcurrencyKey(Wire):
    """``<sha256 of the key>`` in heddle-concurrency: the key, the limit of the last run that
    took it, the runs holding it in the order they took it, those queued for it in order, and
    the runs cancelled to make room (shared/core/concurrency.py decides every change)."""

    key: str = ""
    limit: int = 1
    holders: list[str] = []
    queue: list[str] = []
    cancels: list[KeyCancel] = []


class LogLine(FrozenWire, frozen=True):
    """A JSON message of a step's log (HEDDLE_LOGS, ``heddle.log.<run>.<step>.<attempt>``):
    the services' notes (docs/logs.md). The command's own output is in chunks of raw lines
    instead (``chunk_texts``).

    ``stream`` is heddle for the transitions the services write (stdout or stderr in the
    JSON chunks of earlier versions). ``seq`` is the runner's number of the (first) line
    within the attempt, 1, 2, 3 ...; the lines of a message follow it (seq + 1, ...); the
    orchestrator's notes have seq 0. A single line has ``text``
    (``{"stream","seq","text"}``), several have ``lines`` instead
    (``{"stream","seq","lines":[...]}``). ``texts()`` gives the lines of either shape."""

    stream: str
    seq: int
    text: str | None = None
    lines: list[str] | None = None

    def texts(self) -> list[str]:
        if self.lines is not None:
            return self.lines
        return [self.text] if self.text is not None else []


MAX_CHUNK_LINES = 4000  # lines in one log message at most: < CURSOR_SPAN (readers' cursors)


def chunk_texts(body: bytes) -> list[str]:
    """The lines of a chunk of a command's output: its body is the lines as the command
    wrote them, newline-separated, without the last newline; invalid UTF-8 reads as U+FFFD
    (a newline is never part of a sequence, so this is decoding line by line)."""
    return body.decode("utf-8", errors="replace").split("\n")


class AttemptRecord(Wire):
    attempt: int
    runner: str | None = None
    pid: int | None = None  # the attempt's shell, which leads its process group
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    outputs: dict[str, str] = {}  # the attempt's, if it succeeded
    child_run: str | None = None  # the run a call step's attempt started


class ApprovalDecision(Wire):
    """How an approval gate was answered: by whom (a token's name; ``timeout`` when its time
    ran out), when, and the comment given."""

    approved: bool
    by: str
    decided_at: str
    comment: str = ""


class ApprovalGate(Wire):
    """``<run>.<step>`` in heddle-approvals (docs/approvals.md): a gate waiting, written by
    the orchestrator when the gate starts waiting; the gateway sets ``decision`` by
    compare-and-set, so a gate is answered once, then sends DecideApproval."""

    run_id: str
    step_id: str
    attempt: int
    message: str
    since: str
    deadline_at: str | None = None
    workflow_name: str | None = None
    decision: ApprovalDecision | None = None


class StepRecord(Wire):
    id: str
    command: str = ""
    index: int = 0  # position in the workflow document, for display order
    depends_on: list[str] = []
    retries: int = 0
    timeout_seconds: float = 3600.0
    status: StepStatus = "pending"
    attempt: int = 0
    runner: str | None = None
    exit_code: int | None = None
    queued_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    last_heartbeat_at: str | None = None
    retry_at: str | None = None
    reason: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    attempts: list[AttemptRecord] = []
    requeues: int = 0  # the current attempt queued again after its assignment was lost
    ticket: str = ""  # the current attempt's (StepReady.ticket); never shown by the API
    env: dict[str, str] = {}  # the step's static variables (StepSpec.env)
    when: str | None = None  # StepSpec.when
    allow_failure: bool = False  # StepSpec.allow_failure
    on_exit: bool = False  # an exit handler (SubmitRun.on_exit), run after every other step
    # The runner the current attempt was handed to directly (the one whose success readied
    # it), its answer not yet known: no ready message of it is in the stream.
    offered_to: str | None = None
    for_each: str | None = None  # StepSpec.for_each
    max_parallel: int | None = None  # StepSpec.max_parallel
    runs_on: list[str] = []  # StepSpec.runs_on
    semaphores: list[str] = []  # StepSpec.semaphores
    # The semaphore a pending step waits for a slot of (docs/pools.md, "Semaphores"); set
    # from when it asks for its slots until it holds them all.
    semaphore_wait: str | None = None
    # A forEach step's instance count once expanded (None: not yet); the instances are the
    # run's steps ``<id>[0]``... that name it as their ``parent``.
    instances: int | None = None
    # A forEach step's outputs once every instance has succeeded: per key, a JSON array of
    # the instances' values in index order (null where one wrote none).
    loop_outputs: dict[str, str] = {}
    parent: str | None = None  # an instance's forEach step
    item: str | None = None  # an instance's item (HEDDLE_ITEM)
    item_index: int | None = None  # an instance's place in the list (HEDDLE_ITEM_INDEX)
    approval: Approval | None = None  # StepSpec.approval
    decision: ApprovalDecision | None = None  # how its gate was answered
    workflow: WorkflowCall | None = None  # StepSpec.workflow
    child_run: str | None = None  # the run its current attempt started

    @property
    def outputs(self) -> dict[str, str]:
        """The outputs that count: the succeeded attempt's (the last), none otherwise; a
        forEach step's, its instances' gathered."""
        if self.status != "succeeded":
            return {}
        if self.for_each is not None:
            return self.loop_outputs
        if self.attempts:
            return self.attempts[-1].outputs
        return {}


class RunRecord(Wire):
    run_id: str
    status: RunStatus
    created_at: str
    step_count: int
    finished_at: str | None = None
    cancel_requested: bool = False
    # Cancelled again while its exit handlers run (a first cancel lets them run): they too.
    exit_cancelled: bool = False
    workflow_name: str | None = None
    version: int | None = None
    trigger: str = "api"
    scheduled_for: str | None = None
    scheduled_tz: str | None = None
    params: dict[str, str] = {}  # the values the run was given, defaults applied
    env: dict[str, str] = {}  # the workflow's static variables
    retry_of: str | None = None  # the run this one retries
    retried_by: str | None = None  # the run that retries this one
    # Held back while its orchestrator's runs under way are at their bound: every step
    # pending until its turn (HEDDLE_MAX_RUNS_UNDER_WAY, services/orchestrator/admission.py).
    waiting: bool = False
    # The workflow's timeoutSeconds, and the deadline it gives the run: its creation plus
    # that (RFC 3339). Stored, so that no restart of an orchestrator resets or loses it.
    timeout_seconds: float | None = None
    deadline_at: str | None = None
    # Why the run was stopped before its steps ended it: set when its deadline passes
    # (``deadline: ...``), when every step still going is killed or cancelled; the run then
    # ends failed once the killed ones have reported (services/orchestrator/state.py).
    reason: str | None = None
    # Higher first: a waiting run is admitted before those of lower priority, whenever they
    # came (services/orchestrator/admission.py), and its steps carry it (StepReady.priority).
    priority: int = 0
    # The concurrency key the run waits for, and the run that holds it (or, while it waits
    # for its namespace's quota, a run holding that).
    concurrency_wait: str | None = None
    concurrency_holder: str | None = None
    # The run counts toward its namespace's runs-under-way quota (the namespace had one when
    # the run came): it takes the quota's key before its own and gives it back when it ends;
    # ``quota_wait`` while it waits for it (docs/namespaces.md, "Quotas").
    runs_quota: bool = False
    quota_wait: bool = False
    # The run's concurrency key, its limit and what it does at the limit (SubmitRun's):
    # the key is held from its turn until the run ends (docs/pools.md, "Concurrency limits").
    concurrency_key: str | None = None
    concurrency_limit: int = 1
    on_limit: OnLimit = "queue"
    notify: list[Notify] = []  # SubmitRun.notify
    parent_run: str | None = None  # SubmitRun.parent_run
    parent_step: str | None = None
    call_depth: int = 0

    @property
    def registered_workflow(self) -> str | None:
        """The registered workflow whose history this run belongs to. An inline run may
        carry any name, but only a trigger of a registered version (which sets ``version``)
        enters that workflow's history, ``lastRun`` and retention count."""
        return self.workflow_name if self.version is not None else None


# ---- the workflow registry (heddle-workflows), cron state (heddle-cron), run history ----


class WorkflowVersion(Wire):
    """``<name>.v<version>``: one registered definition, created once and never changed."""

    name: str
    version: int
    registered_at: str
    digest: str  # sha256 of the canonical document: an identical one is not a new version
    spec: WorkflowSpec


class Pause(Wire):
    """A closed interval during which a schedule was paused; its slots are never run."""

    start: str
    end: str


class WorkflowLatest(Wire):
    """``<name>.latest``: the newest version's summary plus the workflow-wide state (paused).
    Small on purpose: listing workflows reads only these."""

    name: str
    version: int
    registered_at: str
    digest: str
    step_count: int
    schedule: str | None = None
    timezone: str | None = None
    catchup: bool = True
    description: str | None = None
    schedule_since: str | None = None  # registration of the version that began the schedule
    paused: bool = False
    paused_at: str | None = None
    pauses: list[Pause] = []  # the most recent closed pauses, oldest first


class CronCursor(Wire):
    """``<name>.cursor`` in heddle-cron: every slot at or before ``through`` is handled."""

    name: str
    through: str
    updated_at: str


class CronSlot(Wire):
    """``<name>.<slot>`` in heddle-cron: created at most once, by the scheduler that claims it."""

    name: str
    slot: str
    run_id: str
    version: int
    claimed_at: str


class NotifyAttempt(Wire):
    """One POST of a run's end to a target: when, and the answer's status or the error."""

    at: str
    status: int | None = None
    error: str | None = None


class Notification(Wire):
    """``<run>.<index>`` in heddle-notifications (docs/notifications.md): the delivery of a
    run's end to its workflow's ``notify[index]``, and every attempt at it."""

    run_id: str
    index: int
    url: str
    run_status: RunStatus
    state: Literal["pending", "delivered", "gave-up"] = "pending"
    attempts: list[NotifyAttempt] = []
    finished_at: str = ""  # the run's end: retries stop HEDDLE_NOTIFY_RETRY_FOR after it
    next_at: str | None = None  # the next attempt's time, after one failed
    # A gateway sending it holds it until then (compare-and-set): past it, one that died
    # mid-send is taken for gone and the attempt is made again.
    claimed_until: str | None = None


class RunSummary(Wire):
    """``hist.<workflow>.<run>`` and ``last.<workflow>`` in heddle-runs: one run of a named
    workflow as its history lists it, step counts included."""

    run_id: str
    workflow_name: str
    status: RunStatus
    created_at: str
    step_count: int
    counts: dict[str, int] = {}
    version: int | None = None
    trigger: str = "api"
    scheduled_for: str | None = None
    finished_at: str | None = None


# ---- codecs, built once per process ---------------------------------------------------

encode = msgspec.json.Encoder().encode
command_decoder = msgspec.json.Decoder(AnyCommand)
event_decoder = msgspec.json.Decoder(AnyStepEvent)
step_ready_decoder = msgspec.json.Decoder(StepReady)
assign_reply_decoder = msgspec.json.Decoder(AssignReply)
cancel_attempt_decoder = msgspec.json.Decoder(CancelAttempt)
heartbeat_decoder = msgspec.json.Decoder(Heartbeat)
log_line_decoder = msgspec.json.Decoder(LogLine)
runner_info_decoder = msgspec.json.Decoder(RunnerInfo)
runner_pod_decoder = msgspec.json.Decoder(RunnerPod)
step_record_decoder = msgspec.json.Decoder(StepRecord)
run_record_decoder = msgspec.json.Decoder(RunRecord)
run_request_decoder = msgspec.json.Decoder(RunRequest)
workflow_spec_decoder = msgspec.json.Decoder(WorkflowSpec)
workflow_version_decoder = msgspec.json.Decoder(WorkflowVersion)
workflow_latest_decoder = msgspec.json.Decoder(WorkflowLatest)
cron_cursor_decoder = msgspec.json.Decoder(CronCursor)
cron_slot_decoder = msgspec.json.Decoder(CronSlot)
run_summary_decoder = msgspec.json.Decoder(RunSummary)
semaphore_decoder = msgspec.json.Decoder(Semaphore)
concurrency_key_decoder = msgspec.json.Decoder(ConcurrencyKey)
namespace_record_decoder = msgspec.json.Decoder(NamespaceRecord)
approval_gate_decoder = msgspec.json.Decoder(ApprovalGate)
notification_decoder = msgspec.json.Decoder(Notification)
