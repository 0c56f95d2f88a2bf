"""Where the client connects, the token it sends and the namespace it works in, as the
command line finds them: an argument, else an environment variable, else the files
`heddle up` writes in its data dir (``.heddle``). Every problem is a ``Usage``.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path
from stat import S_ISREG

from heddle.shared.api.errors import Usage
from heddle.shared.api.request import TIMEOUT, Connection
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


def connection(
    url: str | None = None,
    token: str | None = None,
    token_file: str | None = None,
    namespace: str | None = None,
    *,
    token_required: bool = False,
    timeout: float = TIMEOUT,
) -> Connection:
    """The connection the arguments, the environment and ``.heddle`` make (the token first,
    then the address, then the namespace); Usage naming what is wrong."""
    found = resolve_token(token, token_file, required=token_required)
    return Connection(resolve_url(url), found, resolve_namespace(namespace), timeout)
