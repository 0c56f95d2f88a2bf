"""Runner labels and which steps a runner takes (docs/pools.md). Pure: no I/O.

A runner's labels are its pool's name and any others it is given. A step's ``runsOn`` names
labels a runner must all have; a step without ``runsOn`` goes to the default pool alone, so
that the runners of a named pool (the GPU ones, say) are never spent on small steps.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from itertools import combinations
from typing import Protocol

DEFAULT_POOL = "default"
# A label is a subject token and part of a consumer's name: no dot, wildcard or space.
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
# A runner serves every set of its labels a step may ask for: one consumer each in a
# dispatcher, so their number is kept small.
MAX_RUNNER_LABELS = 6
MAX_RUNS_ON = 6
KEY_SEPARATOR = "+"


def label_problems(labels: Sequence[str], most: int) -> list[str]:
    """Every problem with a list of labels."""
    problems = [
        f"label {label!r} must be 1-63 letters, digits, '-' or '_', starting with a letter or digit"
        for label in labels
        if not LABEL.match(label)
    ]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        problems.append(f"labels repeated: {', '.join(repeated)}")
    if len(set(labels)) > most:
        problems.append(f"at most {most} labels, not {len(set(labels))}")
    return problems


def parse_labels(text: str) -> list[str]:
    """HEDDLE_RUNNER_LABELS: comma-separated, blanks ignored."""
    return [part.strip() for part in text.split(",") if part.strip()]


def runner_labels(pool: str, extra: Iterable[str]) -> list[str]:
    """A runner's labels: its pool's name and the others, sorted, each once."""
    return sorted({pool, *extra})


def takes(pool: str, labels: Iterable[str], runs_on: Sequence[str]) -> bool:
    """Whether a runner of ``pool`` with ``labels`` takes a step asking for ``runs_on``;
    ``runsOn: [default]`` is the default pool, as no ``runsOn`` is."""
    if not runs_on or set(runs_on) == {DEFAULT_POOL}:
        return pool == DEFAULT_POOL
    return set(runs_on) <= set(labels)


def label_key(runs_on: Iterable[str]) -> str:
    """The one name of a set of labels asked for: sorted, joined; "" for none, and for the
    default pool's name alone (its steps go where those without runsOn go)."""
    key = KEY_SEPARATOR.join(sorted(set(runs_on)))
    return "" if key == DEFAULT_POOL else key


class _AsksLabels(Protocol):
    runs_on: list[str]


def same_labels(a: _AsksLabels, b: _AsksLabels) -> bool:
    """Whether two steps ask for the same labels: a runner that took one takes the other."""
    return set(a.runs_on) == set(b.runs_on)


def key_labels(key: str) -> list[str]:
    return key.split(KEY_SEPARATOR) if key else []


def served_keys(labels: Sequence[str]) -> list[str]:
    """Every set of labels a runner with ``labels`` takes a step asking for, by key."""
    unique = sorted(set(labels))
    return [
        KEY_SEPARATOR.join(subset)
        for size in range(1, len(unique) + 1)
        for subset in combinations(unique, size)
    ]
