"""The documents the HTTP API answers with, as msgspec structs.

The handlers build these and encode them; ``document.py`` generates the API's schema from the
same types, so the document and the answers cannot drift apart. Unlike the wire structs
(``shared/wire/contracts.py``) nothing is left out: every field is in every answer, null when it
has no value, and every field is required in the schema; but ``waitingFor``, present only on
what waits, and the error's details.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from heddle.shared.core.namespaces import DEFAULT_NAMESPACE
from heddle.shared.wire.contracts import (
    Approval,
    ApprovalDecision,
    AttemptRecord,
    RunStatus,
    StepStatus,
    WorkflowCall,
)
from heddle.shared.wire.names import ID_PATTERN

# An id as JSON Schema states it (``$`` for Python's ``\Z``), for the types only the
# document uses; the gateway checks ids in shared/core/validation.py.
ID_SCHEMA_PATTERN = ID_PATTERN.pattern.replace("\\Z", "$")
Id = Annotated[str, msgspec.Meta(pattern=ID_SCHEMA_PATTERN)]


class Doc(msgspec.Struct, rename="camel", kw_only=True):
    """Base of every answer: camelCase JSON, every field present."""


# ---- errors -------------------------------------------------------------------------------


class ProblemDoc(Doc):
    path: str  # where in the request, e.g. ``steps[3].id`` or a query parameter's name
    message: str


class ErrorDoc(Doc):
    """Every 4xx and 5xx: ``error`` says what is wrong; ``problems`` lists each problem when
    there are several places to fix."""

    error: str
    problems: list[ProblemDoc] | msgspec.UnsetType = msgspec.UNSET
    status: str | msgspec.UnsetType = msgspec.UNSET  # a finished run's, on a 409
    needs: str | msgspec.UnsetType = msgspec.UNSET  # the role a 403 asks for
    role: str | msgspec.UnsetType = msgspec.UNSET  # the caller's role, on a 403
    host: str | msgspec.UnsetType = msgspec.UNSET  # the Host refused, on a 421
    # The concurrency key a run was refused at (onLimit refuse), and a run holding it, on a 409.
    key: str | msgspec.UnsetType = msgspec.UNSET
    held_by: str | msgspec.UnsetType = msgspec.UNSET
    # Problems past the first MAX_LISTED_PROBLEMS, counted, not listed.
    problems_not_listed: int | msgspec.UnsetType = msgspec.UNSET


class StatusDoc(Doc):
    status: str


# ---- runs ---------------------------------------------------------------------------------


class Submitted(Doc):
    """A run asked for: 201 created, 200 it existed already, 202 accepted (not yet stored)."""

    run_id: str
    status: str
    created: bool | msgspec.UnsetType = msgspec.UNSET
    namespace: str = "default"  # the run's (docs/namespaces.md)


class Triggered(Submitted, kw_only=True):
    workflow: str
    version: int


class Edge(Doc):
    from_: str = msgspec.field(name="from")
    to: str


WaitReason = Literal[
    "runners-busy",
    "no-runner",
    "semaphore",
    "quota",
    "concurrency",
    "runs-at-limit",
    "priority",
    "backoff",
    "turn",
    "approval",
]


class WaitingFor(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """Why a step or a run waits (services/gateway/reads/waiting.py, docs/api.md, "Why a step
    waits"): a short code, a sentence for people, and the facts the sentence states, each
    present only where its reason has it."""

    reason: WaitReason
    sentence: str
    pool: str | None = None  # the runners' pool (runners-busy, no-runner)
    busy: int | None = None  # of the runners that could take it, how many are busy
    total: int | None = None  # how many could take it
    labels: list[str] | None = None  # the labels the step asks for (its runsOn)
    semaphore: str | None = None
    holders: list[str] | None = None  # who holds the semaphore's slots
    key: str | None = None  # the concurrency key
    held_by: str | None = None  # the run holding it
    until: str | None = None  # the end of a retry's backoff (RFC 3339)
    ahead: int | None = None  # waiting runs of higher priority ahead of it
    namespace: str | None = None  # whose quota it waits for (quota)
    quota: int | None = None  # that quota: its most running steps at once
    message: str | None = None  # an approval gate's (approval)


class StepDocument(Doc):
    id: str
    command: str
    depends_on: list[str]
    status: StepStatus
    attempt: int
    runner: str | None
    exit_code: int | None
    started_at: str | None
    finished_at: str | None
    last_heartbeat_at: str | None
    stdout_tail: str
    stderr_tail: str
    reason: str | None
    retries: int
    timeout_seconds: float
    queued_at: str | None
    requeues: int
    retry_at: str | None
    attempts: list[AttemptRecord]
    env: dict[str, str]  # the step's static variables (over the workflow's)
    outputs: dict[str, str]  # what its succeeded attempt wrote to $HEDDLE_OUTPUTS
    when: str | None = None  # its condition (docs/workflows.md, "Conditions")
    allow_failure: bool = False
    on_exit: bool = False  # an exit handler (the workflow's onExit)
    # A forEach step's (docs/workflows.md, "Loops"): its expression and cap; an instance's:
    # its step (``parent``), its item as HEDDLE_ITEM holds it, and its index.
    for_each: str | None = None
    max_parallel: int | None = None
    runs_on: list[str] = []  # the runner labels it asks for (docs/pools.md)
    parent: str | None = None
    item: str | None = None
    item_index: int | None = None
    # A call step's (docs/sub-workflows.md): the workflow it calls, and the child run its
    # current attempt started (each attempt's is in ``attempts``).
    workflow: WorkflowCall | None = None
    child_run: str | None = None
    # An approval gate's (docs/approvals.md): what it asks, and how it was answered.
    approval: Approval | None = None
    decision: ApprovalDecision | None = None
    # Why it waits, in the run document only; absent when it does not wait.
    waiting_for: WaitingFor | msgspec.UnsetType = msgspec.UNSET


class RunFacts(Doc):
    """What the run document and the runs list share: the run record's fields. Its id and
    its workflow's name are their own, within ``namespace`` (docs/namespaces.md)."""

    run_id: str
    namespace: str
    status: RunStatus
    created_at: str
    finished_at: str | None
    cancel_requested: bool
    workflow_name: str | None
    version: int | None
    trigger: str
    scheduled_for: str | None
    scheduled_tz: str | None  # the schedule's timezone, with scheduledFor
    # Waiting for its turn: its orchestrator's runs under way are at their bound
    # (HEDDLE_MAX_RUNS_UNDER_WAY); every step is pending until then.
    waiting: bool
    priority: int  # higher first (docs/workflows.md, "Priority")


class NotifyAttemptDoc(Doc):
    at: str
    status: int | None  # the target's answer; null when none came
    error: str | None  # why the attempt failed; null for a 2xx


class NotificationDoc(Doc):
    """A notify target of the run's workflow (docs/notifications.md) and its delivery:
    ``state`` null while none is made (the run has not ended, or not in one of ``on``)."""

    index: int
    url: str
    on: list[str]
    state: Literal["pending", "delivered", "gave-up"] | None
    attempts: list[NotifyAttemptDoc]


class RunDocument(RunFacts, kw_only=True):
    params: dict[str, str]  # the parameter values the run was given, defaults applied
    env: dict[str, str]  # the workflow's static variables
    retry_of: str | None  # the run this one retries
    retried_by: str | None  # the run that retries this one
    timeout_seconds: float | None  # the workflow's timeoutSeconds
    deadline_at: str | None  # its creation plus timeoutSeconds (docs/workflows.md, "Run deadlines")
    # Why it was stopped before its steps ended it: ``deadline: ...`` once its deadline passed
    reason: str | None
    # The concurrency key it holds or waits for, evaluated when it was submitted, and that
    # key's limit (docs/pools.md, "Concurrency limits"); null for a run without one.
    concurrency_key: str | None
    concurrency_limit: int | None
    counts: dict[str, int]
    step_count: int
    # False for the summary (``?steps=none``, and by default for a run of more steps than a
    # document holds): ``steps`` and ``edges`` are then empty; GET .../steps reads pages.
    steps_included: bool
    steps: list[StepDocument]
    edges: list[Edge]
    # A child run (docs/sub-workflows.md): the run and step that called it, and how deep it
    # is in calls; null, null and 0 for a run no step called.
    parent_run: str | None
    parent_step: str | None
    call_depth: int
    notifications: list[NotificationDoc]  # one per notify target, in its order
    # Why the run waits: its own turn, or what its steps wait for while none runs; absent
    # when nothing waits.
    waiting_for: WaitingFor | msgspec.UnsetType = msgspec.UNSET


class StepPage(Doc):
    """GET /api/runs/{run}/steps: the steps matching ``status`` (all if none is given), in
    the workflow's order, from ``offset``; ``next`` is the offset of the next page, if any."""

    run_id: str
    namespace: str
    step_count: int  # the run's, whatever the filter
    matching: int  # steps matching the filter
    offset: int
    limit: int
    next: int | None
    steps: list[StepDocument]


class RunListEntry(RunFacts, kw_only=True):
    step_count: int
    counts: dict[str, int] | None  # a registered workflow's runs only, once summarised


class RunList(Doc):
    runs: list[RunListEntry]
    total: int
    matching: int
    limit: int


# ---- a run's events (GET /api/runs/{run}/events, server-sent) -----------------------------


class StepChange(Doc):
    """``event: step``: a step's new state."""

    step_id: str
    status: StepStatus
    attempt: int
    runner: str | None
    exit_code: int | None
    reason: str | None
    started_at: str | None
    finished_at: str | None
    retry_at: str | None
    queued_at: str | None  # the attempt's (the page's timeline)


class RunChange(Doc):
    """``event: run``: the run's new state."""

    run_id: str
    status: RunStatus
    finished_at: str | None
    cancel_requested: bool
    waiting: bool
    reason: str | None  # why it is stopped: ``deadline: ...`` past its deadline
    namespace: str = DEFAULT_NAMESPACE


class RunEnd(Doc):
    """``event: end``: the run is over; the stream ends after it."""

    run_id: str
    status: RunStatus
    finished_at: str | None
    counts: dict[str, int]
    namespace: str = DEFAULT_NAMESPACE


# ---- logs ---------------------------------------------------------------------------------


class LineDoc(msgspec.Struct):
    """One log line (``services/gateway/log_lines.Line``)."""

    cursor: int
    attempt: int
    seq: int
    stream: str
    time: str
    text: str


class AttemptLogs(Doc):
    attempt: int
    line_count: int
    truncated: bool
    lines: list[LineDoc]
    expired: bool | msgspec.UnsetType = msgspec.UNSET  # lines that ran are gone


class StepWithLogs(StepDocument, kw_only=True):
    run_id: str
    namespace: str
    logs: list[AttemptLogs]
    logs_cursor: int
    logs_expired: bool


class LogDump(Doc):
    run_id: str
    namespace: str
    step_id: str
    status: StepStatus
    attempt: int
    lines: list[LineDoc]
    cursor: int
    logs_expired: bool


# ---- the runner pool ----------------------------------------------------------------------


class RunnerDoc(Doc):
    name: str
    pod: str | None
    node: str | None
    pid: int
    status: Literal["idle", "busy"]
    run_id: str | None
    step_id: str | None
    attempt: int | None
    version: str
    started_at: str
    last_seen_at: str
    seconds_since_seen: float | None
    # When the held step's current attempt started (its queued time before its start is
    # reported); null while idle
    held_since: str | None
    pool: str = "default"  # its pool (HEDDLE_RUNNER_POOL)
    labels: list[str] = []  # its pool's name and its other labels: a step's runsOn
    # The only namespaces whose steps it takes (HEDDLE_POOL_NAMESPACES); empty: every one
    namespaces: list[str] = []


class Lease(Doc):
    runner: str
    run_id: str | None
    step_id: str | None


class PodDoc(Doc):
    """A runner pod, as the orchestrator's pod watch last saw it (in a cluster), with what its
    runner's registry entry says."""

    name: str
    runner: str  # the runner it runs (its heddle/runner label)
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    node: str | None
    ready: bool
    restarts: int
    reason: str | None  # why it is not running: Terminating, CrashLoopBackOff, Evicted ...
    last_termination: str | None  # the runner container's last end, e.g. OOMKilled (exit 137)
    seen_at: str  # when the pod watch last saw it change
    # Whether its runner is in the registry: false for a pod whose agent never registered
    # (crash-looping, say) or left it
    registered: bool
    status: Literal["idle", "busy"] | None  # its runner's, null when not registered
    run_id: str | None  # the step its runner holds
    step_id: str | None
    attempt: int | None


class Pool(Doc):
    total: int
    available: int
    leased: list[Lease]
    runners: list[RunnerDoc]
    # The runner pods, in a cluster whose orchestrator watches them; empty elsewhere
    pods: list[PodDoc]


# ---- approval gates (docs/approvals.md) -----------------------------------------------------


class GateComment(Doc, forbid_unknown_fields=True):
    """The optional body of an approve or reject: why (shared/core/approvals.py checks it)."""

    comment: Annotated[str, msgspec.Meta(max_length=4096)] = ""


class GateAnswer(Doc):
    """``POST /api/runs/{run}/steps/{step}/approve`` and ``/reject``: the gate's answer, as
    stored; the run goes on (or fails) as the orchestrator takes it."""

    run_id: str
    namespace: str
    step_id: str
    attempt: int
    decision: ApprovalDecision


class WaitingGate(Doc):
    """A gate waiting for its answer, as ``GET /api/approvals`` lists it."""

    run_id: str
    namespace: str
    step_id: str
    attempt: int
    message: str
    since: str
    deadline_at: str | None  # when it times out, if it has timeoutSeconds
    workflow_name: str | None


class WaitingGates(Doc):
    approvals: list[WaitingGate]
