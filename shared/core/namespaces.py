"""Namespaces: how one team's objects are named apart from another's. Pure: no I/O.

Every workflow, run, semaphore and schedule belongs to a namespace. An object of a namespace
other than ``default`` is stored under its *qualified* name: the namespace and its own name
joined by ``=`` (``team-a=nightly-1``). That is one token of a subject or a KV key, as a name
is, so every subject, key, partition and message id keeps its shape, and what was stored
before namespaces existed (unqualified) is ``default``'s. No name a user writes holds ``=``,
so none is taken for another.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from heddle.shared.wire.errors import Problem

DEFAULT_NAMESPACE = "default"
QUALIFIER = "="
# Spelled as a step id is (names.ID_PATTERN), so it is one token anywhere.
NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")


def namespace_problems(value: object, field: str = "namespace") -> list[Problem]:
    """Every problem with a namespace's name as a request gives it."""
    if not isinstance(value, str):
        return [Problem(field, f"namespace must be a string, not {type(value).__name__}")]
    if not NAMESPACE_PATTERN.match(value):
        return [Problem(field, f"namespace {value!r} must match {NAMESPACE_PATTERN.pattern}")]
    return []


def qualified(namespace: str, name: str) -> str:
    """The stored name of ``name`` in ``namespace``: itself in ``default``."""
    return name if namespace == DEFAULT_NAMESPACE else f"{namespace}{QUALIFIER}{name}"


def split_qualified(stored: str) -> tuple[str, str]:
    """The namespace and the own name of a stored name (``qualified``'s inverse)."""
    namespace, sep, name = stored.partition(QUALIFIER)
    return (namespace, name) if sep else (DEFAULT_NAMESPACE, stored)


def namespace_of(stored: str) -> str:
    """The namespace of a stored run, workflow or semaphore name."""
    return split_qualified(stored)[0]


def own_name(stored: str) -> str:
    """A stored name as its namespace knows it: ``team-a=nightly-1`` is ``nightly-1``."""
    return split_qualified(stored)[1]


def in_namespaces(stored: str, namespaces: Iterable[str] | None) -> bool:
    """Whether a stored name belongs to one of ``namespaces`` (None: to any)."""
    return namespaces is None or namespace_of(stored) in set(namespaces)


def stored_name_problems(value: object, path: str, what: str) -> list[Problem]:
    """Every problem with a stored (perhaps qualified) name, as a command carries it."""
    if not isinstance(value, str):
        return [Problem(path, f"{what} must be a string")]
    namespace, name = split_qualified(value)
    if NAMESPACE_PATTERN.match(namespace) and NAMESPACE_PATTERN.match(name):
        return []
    return [Problem(path, f"{what} {value!r} must be a name, or a namespace '=' a name")]
