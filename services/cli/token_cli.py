"""`heddle token create|list|revoke`: API tokens, through the gateway's HTTP API.

The CLI holds an admin token (``--token-file``, else ``HEDDLE_TOKEN``, else the file named by
``HEDDLE_TOKEN_FILE``, else ``.heddle/admin-token``, which ``heddle up`` writes). ``create``
prints the new token alone on stdout, once, so ``$(heddle token create ...)`` captures it.
Exit codes: 0 done, 1 the gateway refused the request or was not reached, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import msgspec
from heddle.shared.api.client import Client
from heddle.shared.api.config import DEFAULT_TOKEN_FILE, URL_FALLBACK, resolve_token, resolve_url
from heddle.shared.api.errors import Refused, Unreachable, Usage
from heddle.shared.api.request import Connection
from heddle.shared.core.namespaces import NAMESPACE_PATTERN
from heddle.shared.core.tokens import ROLES


def grant(text: str) -> tuple[str, str]:
    """``NAMESPACE=ROLE`` of ``--grant``."""
    namespace, _, role = text.partition("=")
    if not NAMESPACE_PATTERN.match(namespace) or role not in ROLES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NAMESPACE=ROLE, a namespace's name and one of {', '.join(ROLES)}"
        )
    return namespace, role


def create_body(args: argparse.Namespace) -> dict[str, Any]:
    """``POST /api/tokens``'s body; Usage when neither a role nor a grant was given."""
    if args.role is None and not args.grant:
        raise Usage("give --role, or --grant NAMESPACE=ROLE for each namespace")
    body: dict[str, Any] = {"name": args.name}
    if args.role is not None:
        body["role"] = args.role
    if args.grant:
        body["namespaces"] = dict(args.grant)
    return body


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # --url and --token-file go before or after the action: `heddle token create --url ...`
    # as well as `heddle token --url ... create`. After it, they win; left out, they keep
    # what was given before it (SUPPRESS), back to `heddle --url ... token`, else the default.
    before = argparse.ArgumentParser(add_help=False)
    after = argparse.ArgumentParser(add_help=False)
    for parser, default in ((before, argparse.SUPPRESS), (after, argparse.SUPPRESS)):
        parser.add_argument(
            "--url",
            default=default,
            help=f"the gateway (default $HEDDLE_URL or {URL_FALLBACK})",
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
    create.add_argument(
        "--role",
        choices=ROLES,
        help="what the token may do: in default, or, with no --grant, as the system's admin",
    )
    create.add_argument(
        "--grant",
        action="append",
        type=grant,
        default=[],
        metavar="NAMESPACE=ROLE",
        help="a namespace the token may use and its role there; repeat for each",
    )
    ls = action("list", "every token: name, role (in each namespace), created, revoked")
    ls.add_argument("--json", action="store_true", help="the API's JSON instead of a table")
    revoke = action("revoke", "revoke a token, on every gateway at once")
    revoke.add_argument("name")


def roles_shown(token: dict[str, Any]) -> str:
    """A token's role in each namespace, ``team-a:operator,team-b:viewer``, or ``admin`` for
    the system's admin."""
    grants = token.get("namespaces") or {}
    if not grants:
        return str(token["role"])
    return ",".join(f"{ns}:{role}" for ns, role in sorted(grants.items()))


def _table(tokens: list[dict[str, Any]]) -> str:
    rows = [("NAME", "ROLE", "CREATED", "REVOKED")]
    rows += [
        (
            t["name"],
            roles_shown(t),
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
    try:
        token = resolve_token(getattr(args, "token", None), getattr(args, "token_file", None))
        # No namespace: tokens are the system's, not a namespace's.
        client = Client(connection=Connection(resolve_url(getattr(args, "url", None)), token))
        if args.action == "create":
            body = create_body(args)
            made = client.create_token(body["name"], body.get("role"), body.get("namespaces"))
            print(made.token)
            print(
                f"token {made.name} ({made.role}) made: it is shown this once; send it as "
                "Authorization: Bearer <token>, or open the page with ?token=<token>",
                file=sys.stderr,
            )
        elif args.action == "list":
            listed = msgspec.to_builtins(client.tokens())
            print(json.dumps(listed) if args.json else _table(listed["tokens"]))
        else:
            client.revoke_token(args.name)
            print(f"token {args.name} revoked", file=sys.stderr)
    except Usage as exc:
        print(f"heddle token: {exc}", file=sys.stderr)
        return 2
    except (Refused, Unreachable) as exc:
        print(f"heddle token {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0
