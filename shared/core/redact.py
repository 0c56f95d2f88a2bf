"""Tokens taken out of log text, before a line is written. Pure logic, no I/O.

Three shapes are replaced, wherever they appear (a message, a traceback, a field):

- a Heddle token, ``hdl_`` and what follows it (shared/core/tokens.py): ``hdl_[redacted]``;
- the credential after ``Authorization:`` (and its scheme) or after ``Bearer``:
  ``[redacted]`` (a token chosen by hand need not start with ``hdl_``);
- the value of a ``token=`` query parameter: ``[redacted]``.

A credential ends at a space, a quote or a backslash (an escape in the repr of bytes, which
is how aiohttp quotes a request it cannot parse): what follows such a character in a token
chosen by hand is not caught; a Heddle token holds none.
"""

from __future__ import annotations

import re

TOKEN_MARK = "hdl_[redacted]"
MARK = "[redacted]"

_HEDDLE_TOKEN = re.compile(r"hdl_[A-Za-z0-9_\-]+", re.IGNORECASE)
_CREDENTIAL = r"[^\s'\"\\]+"
_SCHEME = r"(?:(?:bearer|basic|token)\s+)?"
# "Authorization: x", "'Authorization': 'x'", '"authorization":"x"', 'Authorization=x'.
_AUTHORIZATION = re.compile(
    r"(authorization(?:\\?['\"])?\s*[:=]\s*(?:\\?['\"])?\s*" + _SCHEME + r")" + _CREDENTIAL,
    re.IGNORECASE,
)
# "Bearer x" alone: aiohttp's LineTooLong quotes an over-long header's value, not its name.
_BEARER = re.compile(r"(\bbearer\s+)" + _CREDENTIAL, re.IGNORECASE)
_QUERY = re.compile(r"([?&;]token=)[^\s&#'\"\\]+", re.IGNORECASE)


def may_hold_token(text: str) -> bool:
    """False if ``text`` surely holds no token (then ``redact`` leaves it as it is). Most log
    lines hold none of these words; looking for them is ten times as fast as a regex."""
    low = text.lower()
    return "hdl_" in low or "token" in low or "authorization" in low or "bearer" in low


def redact(text: str) -> str:
    """``text`` with every token in it replaced by a fixed mark."""
    if not may_hold_token(text):
        return text
    text = _AUTHORIZATION.sub(_keep_prefix, text)
    text = _BEARER.sub(_keep_prefix, text)
    text = _QUERY.sub(_keep_prefix, text)
    return _HEDDLE_TOKEN.sub(TOKEN_MARK, text)


def _keep_prefix(match: re.Match[str]) -> str:
    return match.group(1) + MARK
