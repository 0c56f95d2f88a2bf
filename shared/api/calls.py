"""The HTTP API's routes as calls, shared by the sync and the async client: each function
makes the ``Call`` of one route (method, path with its query, JSON body, and how its answer
is decoded into the type the gateway answers with; request.py). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from heddle.shared.api.answers import (
    GateAnswer,
    LogDump,
    Pool,
    RunDocument,
    RunList,
    StepPage,
    StepWithLogs,
    Submitted,
    Triggered,
    WaitingGates,
)
from heddle.shared.api.events import LogEvent, RunEvent, log_event, run_event
from heddle.shared.api.registry_answers import (
    NamespaceDoc,
    NamespaceList,
    NewToken,
    PausedWorkflow,
    Registered,
    SemaphoreDoc,
    SemaphoreList,
    TokenDoc,
    TokenList,
    WorkflowDefinition,
    WorkflowList,
    WorkflowRuns,
)
from heddle.shared.api.request import Call, Stream, decoder, query, quote


def _id(value: str) -> str:
    return quote(value)


def run_path(run_id: str) -> str:
    return f"/api/runs/{_id(run_id)}"


def step_path(run_id: str, step_id: str) -> str:
    return f"{run_path(run_id)}/steps/{_id(step_id)}"


# ---- runs ---------------------------------------------------------------------------------


def submit(document: dict[str, Any]) -> Call[Submitted]:
    return Call("POST", "/api/runs", decoder(Submitted), document)


def trigger(
    name: str,
    params: Mapping[str, str] | None = None,
    key: str | None = None,
    scheduled_for: str | None = None,
    priority: int | None = None,
) -> Call[Triggered]:
    body: dict[str, Any] = {}
    if key is not None:
        body["idempotencyKey"] = key
    if params:
        body["params"] = dict(params)
    if scheduled_for is not None:
        body["scheduledFor"] = scheduled_for
    if priority is not None:
        body["priority"] = priority
    return Call("POST", f"/api/workflows/{_id(name)}/runs", decoder(Triggered), body or None)


def run(run_id: str, steps: str | None = None) -> Call[RunDocument]:
    return Call("GET", run_path(run_id) + query(steps=steps), decoder(RunDocument))


def steps(
    run_id: str, status: str | None = None, limit: int | None = None, offset: int | None = None
) -> Call[StepPage]:
    page = query(status=status, limit=limit, offset=offset)
    return Call("GET", f"{run_path(run_id)}/steps{page}", decoder(StepPage))


def step(run_id: str, step_id: str, tail: int | None = None) -> Call[StepWithLogs]:
    return Call("GET", step_path(run_id, step_id) + query(tail=tail), decoder(StepWithLogs))


def runs(status: str | None = None, limit: int | None = None) -> Call[RunList]:
    return Call("GET", "/api/runs" + query(limit=limit, status=status), decoder(RunList))


def cancel(run_id: str) -> Call[Submitted]:
    return Call("POST", f"{run_path(run_id)}/cancel", decoder(Submitted))


def retry(run_id: str) -> Call[Submitted]:
    return Call("POST", f"{run_path(run_id)}/retry", decoder(Submitted))


def run_events(run_id: str, steps: str | None = None) -> Stream[RunEvent]:
    """The run's state, then each change, then its end (``steps="none"``: the run's alone)."""
    return Stream(f"{run_path(run_id)}/events{query(steps=steps)}", run_event)


def follow(run_id: str, step_id: str, after: int | None = None) -> Stream[LogEvent]:
    """The step's lines after cursor ``after`` as they are written, until its end."""
    path = f"{step_path(run_id, step_id)}/logs{query(follow=1, after=after)}"
    return Stream(path, log_event)


def logs(
    run_id: str, step_id: str, attempt: int | None = None, after: int | None = None
) -> Call[LogDump]:
    """Every line of the step after cursor ``after``; with ``attempt``, only that attempt's
    (the API has no such filter: the lines are kept here)."""
    whole = decoder(LogDump)

    def answer(raw: bytes) -> LogDump:
        dump = whole(raw)
        if attempt is not None:
            dump.lines = [line for line in dump.lines if line.attempt == attempt]
        return dump

    return Call("GET", f"{step_path(run_id, step_id)}/logs{query(after=after)}", answer)


# ---- approval gates -----------------------------------------------------------------------


def decide(run_id: str, step_id: str, approved: bool, comment: str | None) -> Call[GateAnswer]:
    verb = "approve" if approved else "reject"
    body = None if comment is None else {"comment": comment}
    return Call("POST", f"{step_path(run_id, step_id)}/{verb}", decoder(GateAnswer), body)


def approvals() -> Call[WaitingGates]:
    return Call("GET", "/api/approvals", decoder(WaitingGates))


# ---- registered workflows -----------------------------------------------------------------


def register(document: dict[str, Any]) -> Call[Registered]:
    return Call("POST", "/api/workflows", decoder(Registered), document)


def workflows() -> Call[WorkflowList]:
    return Call("GET", "/api/workflows", decoder(WorkflowList))


def workflow(name: str, version: int | None = None) -> Call[WorkflowDefinition]:
    path = f"/api/workflows/{_id(name)}{query(version=version)}"
    return Call("GET", path, decoder(WorkflowDefinition))


def set_paused(name: str, paused: bool) -> Call[PausedWorkflow]:
    path = f"/api/workflows/{_id(name)}"
    return Call("PATCH", path, decoder(PausedWorkflow), {"paused": paused})


def history(
    workflow: str, status: str | None = None, limit: int | None = None, before: str | None = None
) -> Call[WorkflowRuns]:
    """A registered workflow's runs, newest first; ``before``: the ``next`` of a page."""
    page = query(limit=limit, status=status, before=before)
    return Call("GET", f"/api/workflows/{_id(workflow)}/runs{page}", decoder(WorkflowRuns))


# ---- the system ---------------------------------------------------------------------------


def runners() -> Call[Pool]:
    return Call("GET", "/api/runners", decoder(Pool))


def semaphores() -> Call[SemaphoreList]:
    return Call("GET", "/api/semaphores", decoder(SemaphoreList))


def set_semaphore(name: str, size: int) -> Call[SemaphoreDoc]:
    path = f"/api/semaphores/{_id(name)}"
    return Call("PUT", path, decoder(SemaphoreDoc), {"size": size})


def namespaces() -> Call[NamespaceList]:
    return Call("GET", "/api/namespaces", decoder(NamespaceList))


def tokens() -> Call[TokenList]:
    return Call("GET", "/api/tokens", decoder(TokenList))


def create_token(
    name: str, role: str | None = None, grants: Mapping[str, str] | None = None
) -> Call[NewToken]:
    body: dict[str, Any] = {"name": name}
    if role is not None:
        body["role"] = role
    if grants:
        body["namespaces"] = dict(grants)
    return Call("POST", "/api/tokens", decoder(NewToken), body)


def revoke_token(name: str) -> Call[TokenDoc]:
    return Call("POST", f"/api/tokens/{_id(name)}/revoke", decoder(TokenDoc))


def namespace(name: str) -> Call[NamespaceDoc]:
    return Call("GET", f"/api/namespaces/{_id(name)}", decoder(NamespaceDoc))


def set_quotas(
    name: str, max_runs_under_way: int | None = None, max_running_steps: int | None = None
) -> Call[NamespaceDoc]:
    """Make a namespace, or set its quotas (None: no limit); the system's admin alone."""
    body = {"maxRunsUnderWay": max_runs_under_way, "maxRunningSteps": max_running_steps}
    return Call("PUT", f"/api/namespaces/{_id(name)}", decoder(NamespaceDoc), body)
