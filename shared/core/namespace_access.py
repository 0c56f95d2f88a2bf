"""What a token may do in a namespace, and which namespace a request means. Pure: no I/O.

The gateway decides every request's namespace and the caller's right to it here, and only
here (services/gateway/http/scope.py applies it). A token's grants (shared/core/tokens.py)
are the namespaces it may use, with its role in each; ``None`` stands for every namespace,
as admin: the system's admin, or any caller when authentication is off.

A namespace the caller may not see is told apart from one that does not exist by nothing:
both are *unseen*, so that no answer says what another team has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from heddle.shared.core.namespaces import DEFAULT_NAMESPACE
from heddle.shared.core.tokens import Role, TokenRecord, allows, grants

Grants = Mapping[str, Role] | None  # None: every namespace, as admin
Verdict = Literal["allowed", "unseen", "too-low"]


def caller_grants(caller: TokenRecord | None) -> Grants:
    """The grants of a request's token; None (everything) when the request has none, which
    the auth middleware lets through only with authentication off."""
    return None if caller is None else grants(caller)


def request_namespace(asked: str | None, granted: Grants) -> str:
    """The namespace a request means: the one it names, else the token's own when its
    grants name exactly one, else ``default``."""
    if asked is not None:
        return asked
    if granted is not None and len(granted) == 1:
        return next(iter(granted))
    return DEFAULT_NAMESPACE


def role_there(granted: Grants, namespace: str) -> Role | None:
    """The caller's role in ``namespace``; None where it may see nothing."""
    return "admin" if granted is None else granted.get(namespace)


def access(granted: Grants, namespace: str, needs: Role, exists: bool = True) -> Verdict:
    """Whether the caller may do what needs ``needs`` in ``namespace``: ``unseen`` if it
    may not see the namespace or the namespace does not exist (one answer for both),
    ``too-low`` if it sees it with a lower role."""
    role = role_there(granted, namespace)
    if role is None or not exists:
        return "unseen"
    return "allowed" if allows(role, needs) else "too-low"


def visible(granted: Grants) -> frozenset[str] | None:
    """The namespaces whose objects a list shows the caller (None: all)."""
    return None if granted is None else frozenset(granted)


def listed(granted: Grants, asked: str | None) -> frozenset[str] | None:
    """The namespaces a list shows: the one asked for, else every one the caller sees.
    A namespace asked for that the caller may not see is the caller's to refuse (unseen)."""
    return visible(granted) if asked is None else frozenset({asked})


# ---- tokens --------------------------------------------------------------------------------


def administered(granted: Grants) -> frozenset[str] | None:
    """The namespaces whose tokens the caller manages: where it is admin (None: all)."""
    if granted is None:
        return None
    return frozenset(ns for ns, role in granted.items() if role == "admin")


def ungrantable(granted: Grants, wanted: Grants) -> list[str]:
    """The namespaces of ``wanted`` (a new token's grants) the caller may not grant, sorted;
    ``["*"]`` when ``wanted`` is the system's admin and the caller is not."""
    mine = administered(granted)
    if mine is None:
        return []
    if wanted is None:
        return ["*"]
    return sorted(ns for ns in wanted if ns not in mine)


def manages(granted: Grants, record: TokenRecord) -> bool:
    """Whether the caller may see and revoke ``record``: every grant of it lies within the
    namespaces the caller administers."""
    return not ungrantable(granted, grants(record))
