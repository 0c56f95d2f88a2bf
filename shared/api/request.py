"""One call of the HTTP API as data (``Call``, ``Stream``), the request it makes on a
connection (``prepare``), and its answer read: decoded into its type, or made into a typed
error. Pure: the transports (client.py, async_client.py) send and read; calls.py makes the
call of each route.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
from heddle.shared.api.answers import ErrorDoc
from heddle.shared.api.errors import Refused, Unreachable
from heddle.shared.api.events import Event

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
