"""The five fields of a standard cron expression, checked one by one. Pure: no I/O.

croniter accepts more than standard cron: a reversed range (``1-0`` fires every minute),
letters of its own (``R`` is random, ``L`` last), and any whitespace between fields, a
trailing newline included. A schedule here is what the docs promise: five fields separated
by spaces, each a comma-separated list of ``*``, ``N``, ``A-B`` with A <= B, each optionally
``/STEP``; month and weekday also take names (``JAN``, ``MON``, any case).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_ITEM = re.compile(r"(?P<range>\*|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/(?P<step>[0-9]+))?")
_CRON_CHARS = re.compile(r"[ 0-9A-Za-z*,/-]*")


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] stands for low + i

    def value(self, text: str) -> int | str:
        """The number ``text`` stands for, or why it stands for none."""
        if text.isascii() and text.isdigit() and len(text) <= 2:
            number = int(text)
            if self.low <= number <= self.high:
                return number
            return f"{text} is out of range {self.low}-{self.high}"
        if text.upper() in self.names:
            return self.low + self.names.index(text.upper())
        if self.names and text.isascii() and text.isalpha():
            return f"unknown name {text!r} (names: {', '.join(self.names)})"
        return f"{text!r} is not a number from {self.low} to {self.high}"


FIELDS = (
    Field("minute", 0, 59),
    Field("hour", 0, 23),
    Field("day of month", 1, 31),
    Field("month", 1, 12, MONTHS),
    Field("day of week", 0, 7, WEEKDAYS),  # 0 and 7 are both Sunday
)


def item_problem(item: str, field: Field) -> str | None:
    """Why one item of a field's list is not standard cron, or None."""
    m = _ITEM.fullmatch(item)
    if m is None:
        return f"{item!r} is not *, N or A-B (each optionally /STEP)"
    span = m["range"]
    ends: list[int] = []
    for end in [] if span == "*" else span.split("-"):
        value = field.value(end)
        if isinstance(value, str):
            return value
        ends.append(value)
    if len(ends) == 2 and ends[0] > ends[1]:
        return f"range {span} is reversed: write it from low to high"
    step = m["step"]
    if step is not None and not (len(step) <= 2 and 1 <= int(step) <= field.high):
        return f"step /{step} must be from 1 to {field.high}"
    return None


def fields_problem(expr: str) -> str | None:
    """Why ``expr`` is not five standard cron fields, or None. Names the field at fault."""
    count = len(expr.split())
    if count != len(FIELDS):
        return f"it must have 5 fields (minute hour day month weekday), not {count}"
    if not _CRON_CHARS.fullmatch(expr):
        odd = next(c for c in expr if not _CRON_CHARS.fullmatch(c))
        return f"it holds {odd!r}: fields are separated by spaces, on one line"
    fields = [part for part in expr.split(" ") if part]
    for text, field in zip(fields, FIELDS, strict=True):
        for item in text.split(","):
            problem = item_problem(item, field)
            if problem is not None:
                return f"{field.name} field {text!r}: {problem}"
    return None
