"""Whole numbers from a query string or a header, parsed strictly, for every route; and
whether a header's text came as UTF-8.

``int()`` takes more than a client should send: Unicode digits (``int("٣") == 3``; and
``"²".isdigit()`` is true though ``int("²")`` fails) and thousands of digits (past Python's
limit it raises). Here a number is 1 to ``MAX_DIGITS`` ASCII digits within the route's
bounds, and anything else is a 400 naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from aiohttp import web
from heddle.services.gateway.http.answers import bad_request
from heddle.shared.wire.errors import Problem

MAX_DIGITS = 20  # every bound fits (2**63 has 19 digits); int() never sees a long string
SHOWN = 40  # characters of a bad value repeated in the answer
D = TypeVar("D", int, None)


def sent_as_utf8(text: str) -> bool:
    """Whether a header's value was UTF-8 as sent: aiohttp keeps other bytes as lone
    surrogates, which no hash, key or JSON answer can encode."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def parse_whole(raw: str, low: int, high: int) -> int | None:
    """``raw`` as an int if it is 1 to MAX_DIGITS ASCII digits from ``low`` to ``high``."""
    if not 0 < len(raw) <= MAX_DIGITS or not raw.isascii() or not raw.isdigit():
        return None
    value = int(raw)
    return value if low <= value <= high else None


def whole_number(
    name: str, raw: str | None, low: int, high: int, problems: list[Problem]
) -> int | None:
    """The number ``raw`` holds, or None if it is absent; a problem is added if it is bad."""
    if raw is None:
        return None
    value = parse_whole(raw, low, high)
    if value is None:
        shown = raw if len(raw) <= SHOWN else f"{raw[:SHOWN]}... ({len(raw)} characters)"
        problems.append(
            Problem(name, f"{name} must be a whole number from {low} to {high}, not {shown!r}")
        )
    return value


def _one(name: str, raw: str | None, low: int, high: int, default: D) -> int | D:
    problems: list[Problem] = []
    value = whole_number(name, raw, low, high, problems)
    if problems:
        raise bad_request(f"invalid {name}", problems)
    return default if value is None else value


def query_int(request: web.Request, name: str, low: int, high: int, default: D) -> int | D:
    """``?name=N``, or ``default`` if absent; a 400 naming it if it is not a number in range."""
    return _one(name, request.query.get(name), low, high, default)


def header_int(headers: Mapping[str, str], name: str, low: int, high: int, default: D) -> int | D:
    """A header holding a number, or ``default`` if absent or empty."""
    return _one(name, headers.get(name) or None, low, high, default)
