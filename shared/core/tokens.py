"""API tokens: roles, generation, hashing and the stored record. Pure logic, no I/O.

A token is shown once, when it is made; only its sha256 is stored (in the heddle-tokens
bucket, keyed by the token's name), so a copy of the bucket lets no one in. A token is long
and random, so a plain, unsalted hash is enough: there is nothing to guess from it.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Literal, NamedTuple, cast, get_args

import msgspec
from heddle.shared.core.namespaces import DEFAULT_NAMESPACE, namespace_problems
from heddle.shared.core.validation import check_id
from heddle.shared.wire.contracts import FrozenWire
from heddle.shared.wire.errors import Problem

Role = Literal["viewer", "operator", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)  # lowest first: each role has the rights of those below
PREFIX = "hdl_"  # recognisable in a leaked file or a secret scanner's report
MIN_TOKEN_CHARS = 16  # a bootstrap token chosen by hand must still be hard to guess
ADMIN_NAME = "admin"  # the record the bootstrap token file seeds


class TokenRecord(FrozenWire, frozen=True):
    name: str
    role: Role
    hash: str  # sha256 hex of the token
    created_at: str
    revoked: bool = False
    revoked_at: str | None = None
    # The namespaces this token may use, each with its role there (shared/core/namespaces.py).
    # None (a token made before namespaces existed) is ``role`` in ``default``, but an admin
    # with none is the whole system's admin.
    namespaces: dict[str, Role] = {}


token_record_decoder = msgspec.json.Decoder(TokenRecord)


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def allows(has: Role, needs: Role) -> bool:
    """Whether a token of role ``has`` may do what needs ``needs``."""
    return ROLES.index(has) >= ROLES.index(needs)


def is_system_admin(record: TokenRecord) -> bool:
    """Whether a token is the whole system's admin: ``admin`` in no namespace in particular.
    Only it creates namespaces and tokens for any namespace."""
    return record.role == "admin" and not record.namespaces


def grants(record: TokenRecord) -> dict[str, Role] | None:
    """The namespaces a token may use and its role in each; None for the system's admin,
    who may use every namespace as admin."""
    if is_system_admin(record):
        return None
    return dict(record.namespaces) or {DEFAULT_NAMESPACE: record.role}


def role_in(record: TokenRecord, namespace: str) -> Role | None:
    """A token's role in ``namespace``, or None where it may see nothing."""
    granted = grants(record)
    return "admin" if granted is None else granted.get(namespace)


def highest_role(record: TokenRecord) -> Role:
    """The highest role a token has anywhere: what a route's least role is checked against
    before the route's namespace is known."""
    granted = grants(record)
    if granted is None:
        return "admin"
    return max(granted.values(), key=ROLES.index)


def token_text_problem(token: str) -> str | None:
    """What is wrong with a token read from a file (never quoting it), or None."""
    if not token:
        return "the token is empty"
    if any(c.isspace() for c in token) or not token.isprintable():
        return "the token contains spaces or control characters"
    if len(token) < MIN_TOKEN_CHARS:
        return f"the token is shorter than {MIN_TOKEN_CHARS} characters"
    return None


class TokenRequest(NamedTuple):
    """``POST /api/tokens`` as parsed: a token's name, its role and its grants."""

    name: str
    role: Role
    namespaces: dict[str, Role]


def parse_token_request(doc: object) -> TokenRequest | list[Problem]:
    """The token ``POST /api/tokens`` asks for, or every problem with the document. With
    ``namespaces`` (each a role), ``role`` may be left out: it is stored as the highest.
    Whether each namespace exists is the caller's to check (it needs the store)."""
    if not isinstance(doc, dict):
        return [Problem("", "the body must be a JSON object")]
    fields = ("name", "role", "namespaces")
    problems = [Problem(k, f"unknown field {k!r}") for k in doc if k not in fields]
    name, role, namespaces = doc.get("name"), doc.get("role"), doc.get("namespaces", {})
    check_id(name, "name", "token name", problems)
    granted = _grants_problems(namespaces, problems)
    if (role is not None or not granted) and role not in ROLES:
        problems.append(Problem("role", f"role must be one of {', '.join(ROLES)}, not {role!r}"))
    if problems:
        return problems
    if granted:  # what the route's least role is checked against (highest_role)
        role = max(granted.values(), key=ROLES.index)
    # As check_id, ROLES and _grants_problems found them.
    return TokenRequest(cast(str, name), cast(Role, role), granted)


def _grants_problems(namespaces: object, problems: list[Problem]) -> dict[str, Role]:
    """``namespaces`` as grants; every problem with it added to ``problems``."""
    if not isinstance(namespaces, dict):
        problems.append(Problem("namespaces", "namespaces must be an object: namespace -> role"))
        return {}
    for ns, role in namespaces.items():
        path = f"namespaces.{ns}"
        problems.extend(Problem(path, p.message) for p in namespace_problems(ns))
        if role not in ROLES:
            message = f"role must be one of {', '.join(ROLES)}, not {role!r}"
            problems.append(Problem(path, message))
    return cast(dict[str, Role], namespaces)
