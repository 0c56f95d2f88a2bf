"""The gateway's HTTP API as the command line sees it: where to connect, which token to send,
one JSON call, and a server-sent event stream. Only the standard library: a command that
reads a run should not need aiohttp's event loop.

Errors are typed so each command maps them to its exit code in one place:
``Usage`` (the call cannot be made as given), ``Refused`` (the gateway answered with an
error status) and ``Unreachable`` (no answer at all).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any

from heddle.shared.core.namespaces import NAMESPACE_PATTERN

DATA_DIR = ".heddle"  # `heddle up`'s data dir by default, where its token and address are
DEFAULT_TOKEN_FILE = f"{DATA_DIR}/admin-token"
URL_FILE = f"{DATA_DIR}/url"  # the gateway's address, written by `heddle up` beside its token
# Where the address comes from when none is given, as help texts name it. There is no fixed
# port to fall back on: a step listening on it would be sent the token.
URL_FALLBACK = f"the address in {URL_FILE}"
NO_URL = (
    f"no gateway address: give --url, set HEDDLE_URL, or run it in the directory where "
    f"`heddle up` keeps its data dir ({URL_FILE})"
)
TIMEOUT = 30.0  # seconds; a followed log gets a keepalive every 15 s, so this is no limit


class ClientError(Exception):
    """Base of the command line's errors."""


class Usage(ClientError):
    """The command cannot be sent as given (an unreadable token file, a bad document)."""


class Refused(ClientError):
    """The gateway answered with an error status; the message holds its error and problems."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class Unreachable(ClientError):
    """The gateway did not answer at all."""

    def __init__(self, url: str, reason: object) -> None:
        self.url = url
        super().__init__(f"the gateway at {url} did not answer: {reason}")


# What an Authorization header can carry: visible ASCII (Heddle's tokens are URL-safe).
TOKEN_CHARS = re.compile(r"[!-~]+")


def resolve_url(flag: str | None) -> str:
    """``--url``, else ``HEDDLE_URL``, else the address in ``.heddle/url``; Usage if there is
    none, or it is not an http(s) URL."""
    url = (flag or os.environ.get("HEDDLE_URL") or url_from_file(Path(URL_FILE))).rstrip("/")
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise Usage(f"the gateway URL {url!r} is not a URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname or re.search(r"\s", url):
        raise Usage(f"the gateway URL {url!r} is not an http:// or https:// URL with a host")
    return url


def url_from_file(path: Path) -> str:
    """The address `heddle up` wrote. Only a file no one else could have written is believed:
    the token goes where it points."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO put there does not block
    except FileNotFoundError:
        raise Usage(NO_URL) from None
    except OSError as exc:
        raise Usage(f"cannot read the gateway's address in {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as f:
        stat = os.fstat(fd)
        raw = f.read(4096) if S_ISREG(stat.st_mode) else b""
    if not S_ISREG(stat.st_mode) or stat.st_uid != os.geteuid() or stat.st_mode & 0o022:
        raise Usage(
            f"{path} is not trusted: not a regular file of yours that only you may write; "
            "give --url or HEDDLE_URL"
        )
    try:
        url = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise Usage(f"the gateway's address in {path} is not UTF-8 text") from None
    if not url:
        raise Usage(f"the gateway's address in {path} is empty: give --url or HEDDLE_URL")
    return url


def resolve_token(
    flag: str | None = None, token_file: str | None = None, *, required: bool = True
) -> str | None:
    """``--token``, else ``--token-file``, else ``HEDDLE_TOKEN``, else the file named by
    ``HEDDLE_TOKEN_FILE``, else ``.heddle/admin-token``. A file that was named must be read;
    the default one may be missing when not ``required`` (a gateway with HEDDLE_AUTH=none)."""
    if flag:
        return _checked(flag.strip(), "--token")
    if token_file is None and os.environ.get("HEDDLE_TOKEN"):
        return _checked(os.environ["HEDDLE_TOKEN"].strip(), "HEDDLE_TOKEN")
    named = token_file or os.environ.get("HEDDLE_TOKEN_FILE")
    path = named or DEFAULT_TOKEN_FILE
    try:
        token = Path(path).read_text("utf-8").strip()
    except FileNotFoundError as exc:
        if named is None and not required:
            return None
        raise Usage(f"cannot read the token file {path}: {exc.strerror}") from exc
    except OSError as exc:
        raise Usage(f"cannot read the token file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise Usage(f"the token file {path} is not UTF-8 text") from exc
    if not token:
        raise Usage(f"the token file {path} is empty")
    return _checked(token, f"the token file {path}")


def _checked(token: str, source: str) -> str:
    if not TOKEN_CHARS.fullmatch(token):
        raise Usage(f"{source}: a token is visible ASCII, one word (no spaces, no accents)")
    return token


# The routes whose body names the namespace of what they create (the others take ?namespace=).
CREATING = frozenset({("POST", "/api/runs"), ("POST", "/api/workflows"), ("POST", "/workflow")})


def resolve_namespace(flag: str | None) -> str | None:
    """``--namespace``, else ``HEDDLE_NAMESPACE``; None leaves the choice to the gateway.
    Usage if it cannot be a namespace's name."""
    namespace = flag or os.environ.get("HEDDLE_NAMESPACE") or None
    if namespace is not None and not NAMESPACE_PATTERN.match(namespace):
        raise Usage(
            f"the namespace {namespace!r} is not a namespace's name: letters, digits, '-' and "
            "'_', 1 to 64 of them"
        )
    return namespace


def in_namespace(method: str, path: str, body: Any, namespace: str | None) -> tuple[str, Any]:
    """The path and body of a call made in ``namespace``: ``?namespace=`` on the path, and
    in the body of a call that creates a run or a workflow, unless it names its own."""
    if namespace is None or not path.startswith(("/api/", "/workflow")):
        return path, body
    if (method, path) in CREATING and isinstance(body, dict):
        body = {"namespace": namespace, **body}
    joiner = "&" if "?" in path else "?"
    return f"{path}{joiner}namespace={urllib.parse.quote(namespace)}", body


@dataclass(frozen=True, slots=True)
class Gateway:
    url: str
    token: str | None
    namespace: str | None = None

    def request(
        self, method: str, path: str, body: Any = None, accept: str = "application/json"
    ) -> urllib.request.Request:
        path, body = in_namespace(method, path, body, self.namespace)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", accept)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        return request

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded JSON answer of a 2xx, else Refused or Unreachable."""
        return call(self, method, path, body)

    def events(self, path: str) -> Iterator[tuple[str, str]]:
        """Server-sent events of ``path`` as (event name, data), until the server ends it."""
        data: list[str]
        with self._open(self.request("GET", path, accept="text/event-stream")) as resp:
            kind, data = "message", []  # the event's name and its data lines
            for raw in resp:
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if line.startswith(":"):
                    continue  # a keepalive comment
                if not line:
                    if data:
                        yield kind, "\n".join(data)
                    kind, data = "message", []
                elif line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))

    def _open(self, request: urllib.request.Request) -> Any:
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT)
        except urllib.error.HTTPError as exc:
            raise Refused(exc.code, explain(exc.code, exc.read())) from None
        except (urllib.error.URLError, OSError) as exc:
            raise Unreachable(self.url, getattr(exc, "reason", exc)) from None


def call(gateway: Gateway, method: str, path: str, body: Any = None) -> Any:
    request = gateway.request(method, path, body)
    with gateway._open(request) as resp:
        try:
            return json.load(resp)
        except (ValueError, OSError) as exc:
            raise Unreachable(gateway.url, f"a broken answer to {method} {path}: {exc}") from None


def explain(status: int, raw: bytes) -> str:
    """The gateway's error and every problem it listed, one per line."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return f"HTTP {status}: {raw[:200].decode(errors='replace')}"
    if not isinstance(doc, dict):
        return f"HTTP {status}: {raw[:200].decode(errors='replace')}"
    lines = [f"HTTP {status}: {doc.get('error', 'error')}"]
    lines += [f"  {p.get('path') or '(body)'}: {p.get('message')}" for p in doc.get("problems", [])]
    return "\n".join(lines)
