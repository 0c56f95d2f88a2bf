"""The pure bounds on what a request may hold: JSON depth (shared/wire/json_depth.py) and whole
numbers in queries and headers (services/gateway/http/params.py)."""

from __future__ import annotations

import json
import time

import pytest
from heddle.services.gateway.http.params import MAX_DIGITS, parse_whole, whole_number
from heddle.shared.wire.errors import Problem
from heddle.shared.wire.json_depth import MAX_JSON_DEPTH, json_depth_exceeds


def nest(depth: int, inner: str = "") -> str:
    """``depth`` levels, alternating arrays and objects."""
    out = inner
    for i in range(depth):
        out = f"[{out}]" if i % 2 else f'{{"k": {out or 0}}}'
    return out


# ---- JSON depth ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"[[[["', 0),
        ("[]", 1),
        ("[[], {}, [1, 2]]", 2),
        ('{"a": [{"b": [[]]}]}', 5),
        ('["\\"[", ["\\\\", [[]]]]', 4),  # brackets and escapes inside strings do not count
        (nest(10), 10),
        (nest(64), 64),
        (nest(65), 65),
        (nest(1000), 1000),
        ("[" + ",".join([nest(64)] * 500) + "]", 65),
        ("[" + ",".join([nest(63)] * 500) + "]", 64),
        ("[" + "[]," * 10_000 + "[[[]]]]", 4),
    ],
)
def test_depth_is_measured_exactly(text: str, depth: int) -> None:
    if depth < 500:
        json.loads(text)  # every case is valid JSON (json.loads recurses too)
    raw = text.encode()
    for limit in (0, 1, depth - 1, depth, MAX_JSON_DEPTH):
        if limit >= 0:
            assert json_depth_exceeds(raw, limit) is (depth > limit), limit


def test_the_default_bound_is_64() -> None:
    assert not json_depth_exceeds(nest(MAX_JSON_DEPTH).encode())
    assert json_depth_exceeds(nest(MAX_JSON_DEPTH + 1).encode())
    assert MAX_JSON_DEPTH == 64


@pytest.mark.parametrize(
    "unit",
    [b"[" * 64 + b"]" * 64, b"[],", b'"' + b"[" * 100 + b'", ', b"0,"],
)
def test_an_8_mib_body_is_measured_quickly(unit: bytes) -> None:
    raw = b"[" + (unit * ((8 << 20) // len(unit))).rstrip(b", ") + b"]"
    start = time.perf_counter()
    json_depth_exceeds(raw)
    assert time.perf_counter() - start < 3.0  # a few tenths on a quiet machine


# ---- whole numbers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "low", "high", "want"),
    [
        ("0", 0, 10, 0),
        ("10", 0, 10, 10),
        ("007", 0, 10, 7),
        (str(2**63 - 1), 0, 2**63 - 1, 2**63 - 1),
        ("11", 0, 10, None),
        ("0", 1, 10, None),
        ("", 0, 10, None),
        ("-1", 0, 10, None),
        ("+1", 0, 10, None),
        (" 1", 0, 10, None),
        ("1_0", 0, 100, None),  # int() takes underscores
        ("1.5", 0, 10, None),
        ("²", 0, 10, None),  # isdigit() is true, int() fails
        ("٣", 0, 10, None),  # int() takes it: 3
        ("\uff11", 0, 10, None),  # a fullwidth digit one
        ("9" * 5000, 0, 10, None),  # past int()'s digit limit
        ("0" * (MAX_DIGITS + 1), 0, 10, None),
    ],
)
def test_parse_whole(raw: str, low: int, high: int, want: int | None) -> None:
    assert parse_whole(raw, low, high) == want


def test_whole_number_names_the_parameter() -> None:
    problems: list[Problem] = []
    assert whole_number("tail", None, 0, 10, problems) is None and problems == []
    assert whole_number("tail", "5", 0, 10, problems) == 5 and problems == []
    assert whole_number("tail", "9" * 5000, 0, 10, problems) is None
    [problem] = problems
    assert problem.path == "tail"
    assert problem.message.startswith("tail must be a whole number from 0 to 10, not '9999")
    assert "(5000 characters)" in problem.message and len(problem.message) < 150
