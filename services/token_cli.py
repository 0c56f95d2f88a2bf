"""`heddle token create|list|revoke`: API tokens, through the gateway's HTTP API.

The CLI holds an admin token (``--token-file``, else ``HEDDLE_TOKEN``, else the file named by
``HEDDLE_TOKEN_FILE``, else ``.heddle/admin-token``, which ``heddle up`` writes). ``create``
prints the new token alone on stdout, once, so ``$(heddle token create ...)`` captures it.
Exit codes: 0 done, 1 the gateway refused the request or was not reached, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

from shared.tokens import ROLES

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TOKEN_FILE = ".heddle/admin-token"
TIMEOUT = 30.0  # seconds


class Refused(Exception):
    """The gateway answered with an error, or could not be reached."""


class Usage(Exception):
    """The command cannot be sent as given (no token, say)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    # --url and --token-file go before or after the action: `heddle token create --url ...`
    # as well as `heddle token --url ... create`. After it, they win; left out, they keep
    # what was given before it (SUPPRESS), else the default.
    before = argparse.ArgumentParser(add_help=False)
    after = argparse.ArgumentParser(add_help=False)
    for parser, default in ((before, None), (after, argparse.SUPPRESS)):
        parser.add_argument(
            "--url",
            default=default,
            help=f"the gateway (default $HEDDLE_URL or {DEFAULT_URL})",
        )
        parser.add_argument(
            "--token-file",
            default=default,
            help="file holding an admin token (default $HEDDLE_TOKEN, else the file "
            f"$HEDDLE_TOKEN_FILE, else {DEFAULT_TOKEN_FILE})",
        )
    p = sub.add_parser(
        "token",
        parents=[before],
        help="make, list and revoke API tokens (needs an admin token)",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        return actions.add_parser(name, parents=[after], help=help)

    create = action("create", "make a token; prints it, once, on stdout")
    create.add_argument("--name", required=True, help="[A-Za-z0-9_-]{1,64}, unique")
    create.add_argument("--role", required=True, choices=ROLES, help="what the token may do")
    ls = action("list", "every token: name, role, created, revoked")
    ls.add_argument("--json", action="store_true", help="the API's JSON instead of a table")
    revoke = action("revoke", "revoke a token, on every gateway at once")
    revoke.add_argument("name")


def admin_token(token_file: str | None) -> str:
    if token_file is None and os.environ.get("HEDDLE_TOKEN"):
        return os.environ["HEDDLE_TOKEN"].strip()
    path = token_file or os.environ.get("HEDDLE_TOKEN_FILE") or DEFAULT_TOKEN_FILE
    try:
        token = Path(path).read_text("utf-8").strip()
    except OSError as exc:
        raise Usage(f"cannot read the admin token file {path}: {exc.strerror}") from exc
    if not token:
        raise Usage(f"the admin token file {path} is empty")
    return token


def call(url: str, token: str, method: str, path: str, body: Any = None) -> Any:
    """The decoded JSON answer of a 2xx, or Refused with the server's message and problems."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url.rstrip("/") + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        raise Refused(_explain(exc.code, exc.read())) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Refused(f"the gateway at {url} did not answer: {reason}") from None


def _explain(status: int, raw: bytes) -> str:
    try:
        doc = json.loads(raw)
    except ValueError:
        return f"HTTP {status}: {raw[:200].decode(errors='replace')}"
    lines = [f"HTTP {status}: {doc.get('error', 'error')}"]
    lines += [f"  {p.get('path') or '(body)'}: {p.get('message')}" for p in doc.get("problems", [])]
    return "\n".join(lines)


def _table(tokens: list[dict[str, Any]]) -> str:
    rows = [("NAME", "ROLE", "CREATED", "REVOKED")]
    rows += [
        (
            t["name"],
            t["role"],
            t["createdAt"],
            (t.get("revokedAt") or "yes") if t["revoked"] else "-",
        )
        for t in tokens
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3]
        for r in rows
    )


def run(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("HEDDLE_URL") or DEFAULT_URL
    try:
        token = admin_token(args.token_file)
        if args.action == "create":
            body = {"name": args.name, "role": args.role}
            made = call(url, token, "POST", "/api/tokens", body)
            print(made["token"])
            print(
                f"token {made['name']} ({made['role']}) made: it is shown this once; send it as "
                "Authorization: Bearer <token>, or open the page with ?token=<token>",
                file=sys.stderr,
            )
        elif args.action == "list":
            listed = call(url, token, "GET", "/api/tokens")
            print(json.dumps(listed) if args.json else _table(listed["tokens"]))
        else:
            call(url, token, "POST", f"/api/tokens/{quote(args.name, safe='')}/revoke")
            print(f"token {args.name} revoked", file=sys.stderr)
    except Usage as exc:
        print(f"heddle token: {exc}", file=sys.stderr)
        return 2
    except Refused as exc:
        print(f"heddle token {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0
