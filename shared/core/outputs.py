"""A step's outputs: the file named by ``$HEDDLE_OUTPUTS``, in the format of GitHub Actions'
``$GITHUB_OUTPUT``. Pure: bytes in, a dict or a reason out.

Each line is ``key=value`` (the value is everything after the first ``=``), or
``key<<DELIMITER`` followed by the value's lines and a line holding only ``DELIMITER`` (a
multi-line value, its lines joined by ``\\n``). Empty lines are skipped, a ``\\r`` before a
line's end is dropped, and a key given twice keeps its last value. Which of ``=`` and ``<<``
comes first in a line decides its form, as in GitHub's runner.

Heddle is stricter in what it stores, because every output becomes an environment variable
``HEDDLE_OUT_<STEP>_<KEY>`` of the steps downstream: a key is a letter or ``_`` followed by
letters, digits, ``_`` and ``-``; no two keys may spell the same variable; the file is UTF-8
text (tab and newline are its only control characters); and it is at most ``limit`` bytes.
Anything else fails the attempt with the reason ``OutputsError`` gives.
"""

from __future__ import annotations

import re

from heddle.shared.core.step_env import env_part

KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,127}\Z")
# Control characters other than tab and newline (a carriage return is allowed only before
# a newline, and dropped there).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class OutputsError(ValueError):
    """Why a step's outputs cannot be stored: the attempt fails with this as its reason."""


def size_problem(size: int, limit: int) -> str | None:
    if size > limit:
        return f"the outputs file is {size} bytes; the limit is {limit} (HEDDLE_OUTPUTS_MAX_BYTES)"
    return None


def parse_outputs(data: bytes, limit: int, size: int | None = None) -> dict[str, str]:
    """The outputs ``data`` holds (``size``: the file's size, if more was not read)."""
    too_large = size_problem(len(data) if size is None else size, limit)
    if too_large:
        raise OutputsError(too_large)
    lines = _text_lines(data)
    outputs: dict[str, str] = {}
    spelled: dict[str, str] = {}  # variable part -> the key that spells it
    i = 0
    while i < len(lines):
        number = i + 1
        if lines[i] == "":
            i += 1
            continue
        key, value, i = _entry(lines, i)
        _check_key(key, number, spelled)
        outputs[key] = value
    return outputs


def _text_lines(data: bytes) -> list[str]:
    """The file's lines: UTF-8 text with no control characters, LF or CRLF ended."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        number = data[: exc.start].count(b"\n") + 1
        raise OutputsError(f"line {number}: not UTF-8 text (byte {exc.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    for number, line in enumerate(lines, 1):
        bad = _CONTROL.search(line)
        if bad:
            code = f"U+{ord(bad.group()):04X}"
            raise OutputsError(f"line {number}: control character {code}; outputs are text")
    return lines


def _entry(lines: list[str], i: int) -> tuple[str, str, int]:
    """The output that starts at line ``i``: its key, its value and the line after it."""
    line, number = lines[i], i + 1
    i += 1
    eq, heredoc = line.find("="), line.find("<<")
    if eq >= 0 and (heredoc < 0 or eq < heredoc):
        return line[:eq], line[eq + 1 :], i
    if heredoc < 0:
        raise OutputsError(f"line {number}: neither key=value nor key<<DELIMITER: {_shown(line)}")
    key, delimiter = line[:heredoc], line[heredoc + 2 :]
    if delimiter == "":
        raise OutputsError(f"line {number}: {key!r}<< names no delimiter")
    body: list[str] = []
    while i < len(lines) and lines[i] != delimiter:
        body.append(lines[i])
        i += 1
    if i == len(lines):
        raise OutputsError(f"line {number}: no line {delimiter!r} ends the value of {key!r}")
    return key, "\n".join(body), i + 1  # past the delimiter's line


def _check_key(key: str, number: int, spelled: dict[str, str]) -> None:
    if not KEY.match(key):
        raise OutputsError(
            f"line {number}: {key!r} is not an output name (a letter or _, then up to "
            "127 letters, digits, _ or -)"
        )
    part = env_part(key)
    other = spelled.setdefault(part, key)
    if other != key:
        raise OutputsError(
            f"line {number}: outputs {other!r} and {key!r} would be the same variable (..._{part})"
        )


def _shown(line: str, most: int = 60) -> str:
    return repr(line if len(line) <= most else line[:most] + "...")
