"""The documents of what the gateway itself keeps: registered workflows (heddle-workflows)
and API tokens (heddle-tokens), with the request bodies that change them, as msgspec structs,
in the same manner as types.py (every field in every answer, null when it has no value).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from heddle.shared.api.answers import Doc, Edge, Id
from heddle.shared.core.namespaces import NAMESPACE_PATTERN
from heddle.shared.core.tokens import Role
from heddle.shared.wire.contracts import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    ParamSpec,
    RunStatus,
    StepSpec,
    StepStatus,
    WorkflowSpec,
)
from msgspec import UNSET, UnsetType

NAMESPACE_SCHEMA_PATTERN = NAMESPACE_PATTERN.pattern.replace("\\Z", "$")

# ---- registered workflows -----------------------------------------------------------------


class Registered(Doc):
    name: str
    namespace: str
    version: int
    created: bool


class LastRun(Doc):
    run_id: str
    status: RunStatus
    created_at: str


class WorkflowFacts(Doc):
    name: str  # its own, within ``namespace`` (docs/namespaces.md)
    namespace: str
    version: int
    registered_at: str
    schedule: str | None
    timezone: str | None
    catchup: bool
    paused: bool
    step_count: int
    description: str | None


class WorkflowSummary(WorkflowFacts, kw_only=True):
    last_run: LastRun | None
    recent: list[LastRun]  # its newest runs, newest first (at most 10)
    # The schedule's next three slots after now, UTC; empty without a schedule or paused
    next_fires: list[str]


class WorkflowList(Doc):
    workflows: list[WorkflowSummary]


class PausedWorkflow(WorkflowFacts, kw_only=True):
    paused_at: str | None


class WorkflowDefinition(WorkflowFacts, kw_only=True):
    latest_version: int
    params: list[ParamSpec]
    env: dict[str, str]
    timeout_seconds: float | None  # each run's deadline, from its creation
    priority: int  # each run's, unless its trigger gives one
    steps: list[StepSpec]  # as registered: fields at their default are left out
    edges: list[Edge]
    # The workflow's, whichever version is read: as in its list entry
    recent: list[LastRun]  # its newest runs, newest first (at most 10)
    next_fires: list[str]  # the schedule's next three slots after now, UTC


class HistoryEntry(Doc):
    run_id: str
    namespace: str
    status: RunStatus
    version: int | None
    trigger: str
    scheduled_for: str | None
    created_at: str
    finished_at: str | None
    counts: dict[str, int]


class WorkflowRuns(Doc):
    workflow: str
    namespace: str
    runs: list[HistoryEntry]
    next: str | None  # pass as ``before`` for the older runs; null on the oldest page


class GridRun(HistoryEntry, kw_only=True):
    # Each step's state; null for a run of more steps than the grid shows
    states: dict[str, StepStatus] | None


class WorkflowGrid(Doc):
    """A workflow's runs by steps: the history page with every step's state."""

    workflow: str
    namespace: str
    steps: list[str]  # the rows: the latest version's steps in order, then others seen
    runs: list[GridRun]  # the columns, newest first
    next: str | None


# ---- API tokens ---------------------------------------------------------------------------


class TokenDoc(Doc):
    name: str
    role: Role  # its highest; what it may do is its role in each of ``namespaces``
    created_at: str
    revoked: bool
    revoked_at: str | None
    # Its role in each namespace it may use (a token made before namespaces: ``role`` in
    # default); empty for the system's admin, who may use every namespace
    namespaces: dict[str, Role]
    system_admin: bool = False


class TokenList(Doc):
    tokens: list[TokenDoc]


class NewToken(Doc):
    """The one answer that holds a token's secret."""

    name: str
    role: Role
    token: str
    created_at: str
    namespaces: dict[str, Role]


# ---- request bodies the gateway checks by hand (their schema for the document) ------------


class RegisterRequest(WorkflowSpec, kw_only=True, forbid_unknown_fields=True):
    """A workflow document to register: one with a name."""

    name: Id


class PatchWorkflow(Doc, forbid_unknown_fields=True):
    paused: bool


class TriggerRequest(Doc, forbid_unknown_fields=True):
    idempotency_key: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | UnsetType = UNSET
    params: dict[str, str] | UnsetType = UNSET  # values of declared params
    scheduled_for: str | UnsetType = UNSET  # the slot a manual run is for
    # The run's, over the workflow's (docs/workflows.md, "Priority")
    priority: Annotated[int, msgspec.Meta(ge=MIN_PRIORITY, le=MAX_PRIORITY)] | UnsetType = UNSET


class TokenRequest(Doc, forbid_unknown_fields=True):
    name: Id
    # Needed without namespaces; with them, stored as the highest of theirs
    role: Role | UnsetType = UNSET
    # The namespaces it may use, its role in each (docs/namespaces.md)
    namespaces: (
        dict[Annotated[str, msgspec.Meta(pattern=NAMESPACE_SCHEMA_PATTERN)], Role] | UnsetType
    ) = UNSET


# ---- semaphores ---------------------------------------------------------------------------


class SemaphoreStep(Doc):
    """A step holding a slot (``attempt``: the attempt it took it for), or waiting for one."""

    run_id: str
    step_id: str
    attempt: int
    since: str


class SemaphoreDoc(Doc):
    name: str  # its own, within ``namespace``, as its steps name it
    namespace: str
    size: int
    holders: list[SemaphoreStep]
    waiting: list[SemaphoreStep]  # in order of waiting


class SemaphoreList(Doc):
    semaphores: list[SemaphoreDoc]


class SemaphoreSize(Doc, forbid_unknown_fields=True):
    size: Annotated[int, msgspec.Meta(ge=1)]


# ---- namespaces ---------------------------------------------------------------------------


class NamespaceDoc(Doc):
    name: str
    max_runs_under_way: int | None  # null: no limit
    max_running_steps: int | None
    # Its runs under way (holding its runs-under-way quota while it has one; else running,
    # not waiting their turn) and its running steps (holding its quota; null while it has
    # none: they are not counted).
    runs_under_way: int
    running_steps: int | None
    created_at: str | None  # null for default, which exists without a record


class NamespaceList(Doc):
    namespaces: list[NamespaceDoc]


class NamespaceQuotas(Doc, forbid_unknown_fields=True):
    max_runs_under_way: Annotated[int, msgspec.Meta(ge=1)] | None = None
    max_running_steps: Annotated[int, msgspec.Meta(ge=1)] | None = None
