"""How deeply a JSON body nests, measured on its bytes before it is decoded. Pure: no I/O.

Decoding is recursive, so a body nested a thousand levels deep fails with RecursionError
inside the decoder; the gateway refuses anything deeper than ``MAX_JSON_DEPTH`` first. No
Heddle document needs more than a handful of levels.

The check runs at C speed on the bytes (count, ``re.sub``, ``translate``, ``replace``):
strings are dropped, then only brackets are kept, each pass of ``replace(b"[]", b"")``
removes exactly one level, and what remains after a few passes is measured by its runs.
"""

from __future__ import annotations

import re
from itertools import accumulate

MAX_JSON_DEPTH = 64

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
_SAME_BRACKETS = bytes.maketrans(b"{}", b"[]")  # depth does not care which kind
_RUNS = re.compile(rb"\[+|\]+")
_PASSES = 8  # after p passes at most n/(p+1) runs remain, so the last step stays short


def json_depth_exceeds(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True if the arrays and objects in ``raw`` nest more than ``limit`` levels deep
    (``[]`` is one level, ``[{}]`` two). Exact for valid JSON; for invalid JSON it counts
    the brackets outside strings, and the decoder refuses the rest."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", raw).translate(_SAME_BRACKETS, _NOT_BRACKETS)
    if b"[" * (limit + 1) in brackets:
        return True
    removed = 0
    for _ in range(_PASSES):
        fewer = brackets.replace(b"[]", b"")  # every empty array goes: one level less
        if len(fewer) == len(brackets):
            break
        brackets, removed = fewer, removed + 1
    runs = (len(r) if r[:1] == b"[" else -len(r) for r in _RUNS.findall(brackets))
    return removed + max(accumulate(runs), default=0) > limit
