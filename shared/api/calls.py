"""The HTTP API's calls as data, shared by the sync and the async client: each function
makes the ``Call`` of one route (method, path with its query, JSON body, and how its answer
is decoded into the type the gateway answers with), and ``prepare`` makes the request of a
call on a connection. Pure: the transports (client.py, async_client.py) send and read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
from heddle.shared.api.answers import (
    ApprovalList,
    Decision,
    ErrorDoc,
    LogDump,
    Pool,
    RunDocument,
    RunList,
    StepPage,
    StepWithLogs,
    Submitted,
    Triggered,
)
from heddle.shared.api.errors import Refused, Unreachable
from heddle.shared.api.events import Event, LogEvent, RunEvent, log_event, run_event
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

T = TypeVar("T")
E = TypeVar("E")
TIMEOUT = 30.0  # seconds; a followed log gets a keepalive every 15 s, so this is no limit
JSON = "application/json"
EVENTS = "text/event-stream"
# The routes whose body names the namespace of what they create (the others take ?namespace=).
CREATING = frozenset({("POST", "/api/runs"), ("POST", "/api/workflows"), ("POST", "/workflow")})
# What a path segment or query value keeps as it is (RFC 3986's unreserved characters).
UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


@dataclass(frozen=True, slots=True)
class Connection:
    """A gateway (its base URL), the token sent to it, the namespace worked in (None: the
    gateway's choice) and how long one answer is waited for."""

    url: str
    token: str | None
    namespace: str | None = None
    timeout: float = TIMEOUT


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and how its 2xx answer is read."""

    method: str
    path: str  # with its query
    answer: Callable[[bytes], T]
    body: Any = None  # JSON; None: no body


@dataclass(frozen=True, slots=True)
class Stream(Generic[E]):
    """A stream of server-sent events and how each is read (None: one to pass over)."""

    path: str
    event: Callable[[Event], E | None]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A call as it goes on the wire."""

    method: str
    url: str
    data: bytes | None
    headers: dict[str, str]


def quote(text: str) -> str:
    """``text`` as one path segment or query value: every other byte percent-encoded."""
    return "".join(c if c in UNRESERVED else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def query(**values: object) -> str:
    """``?a=1&b=x`` of the values that are not None, in their order; "" for none."""
    given = [f"{k}={quote(str(v))}" for k, v in values.items() if v is not None]
    return "?" + "&".join(given) if given else ""


def in_namespace(method: str, path: str, body: Any, namespace: str | None) -> tuple[str, Any]:
    """The path and body of a call made in ``namespace``: ``?namespace=`` on the path, and
    in the body of a call that creates a run or a workflow, unless it names its own."""
    if namespace is None or not path.startswith(("/api/", "/workflow")):
        return path, body
    if (method, path) in CREATING and isinstance(body, dict):
        body = {"namespace": namespace, **body}
    joiner = "&" if "?" in path else "?"
    return f"{path}{joiner}namespace={quote(namespace)}", body


def prepare(
    conn: Connection, method: str, path: str, body: Any = None, accept: str = JSON
) -> Prepared:
    path, body = in_namespace(method, path, body, conn.namespace)
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": accept}
    if conn.token:
        headers["Authorization"] = f"Bearer {conn.token}"
    if data is not None:
        headers["Content-Type"] = JSON
    return Prepared(method, conn.url + path, data, headers)


def decoder(kind: type[T]) -> Callable[[bytes], T]:
    return msgspec.json.Decoder(kind).decode


def answer_of(call: Call[T], url: str, raw: bytes) -> T:
    """A 2xx answer decoded; Unreachable if it is not what the route answers."""
    try:
        return call.answer(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Unreachable(url, f"a broken answer to {call.method} {call.path}: {exc}") from None


def event_of(stream: Stream[E], url: str, event: Event) -> E | None:
    """An event of a stream decoded; Unreachable if it is not what the stream sends."""
    try:
        return stream.event(event)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Unreachable(url, f"a broken {event.kind!r} event of {stream.path}: {exc}") from None


def refusal(status: int, raw: bytes) -> Refused:
    """The error of a non-2xx answer: the gateway's error and every problem it listed, one
    per line in the message."""
    try:
        doc = msgspec.json.decode(raw, type=ErrorDoc)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return Refused(status, f"HTTP {status}: {raw[:200].decode(errors='replace')}")
    problems = doc.problems or []
    lines = [f"HTTP {status}: {doc.error}"]
    lines += [f"  {p.path or '(body)'}: {p.message}" for p in problems]
    return Refused(status, "\n".join(lines), doc.error, problems)


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


def decide(run_id: str, step_id: str, approved: bool, comment: str | None) -> Call[Decision]:
    verb = "approve" if approved else "reject"
    body = None if comment is None else {"comment": comment}
    return Call("POST", f"{step_path(run_id, step_id)}/{verb}", decoder(Decision), body)


def approvals() -> Call[ApprovalList]:
    return Call("GET", "/api/approvals", decoder(ApprovalList))


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
    name: str, status: str | None = None, limit: int | None = None, before: str | None = None
) -> Call[WorkflowRuns]:
    page = query(limit=limit, status=status, before=before)
    return Call("GET", f"/api/workflows/{_id(name)}/runs{page}", decoder(WorkflowRuns))


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
