"""The benchmark workloads as DAGs of real shell steps, and their names.

A name picks the shape and its size: ``chain-100``, ``fanout-1000``, ``diamonds-200``,
``wide-10k`` (100 layers x 100), ``wide-20x50`` (layers x width), ``logs-200k``,
``foreach-5000`` (a fan-out made by a loop over an upstream output), ``behind-2000`` (a
diamond submitted behind a 2,000-step fan-out of ``sleep 0.05``: fair turns). Sizes accept a
``k`` suffix. Each workload says how many runners the stack gets and how many runs it submits
(``diamonds-N`` submits N separate four-step runs at once; the others one run).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

Step = dict[str, object]  # {"id", "command", "dependsOn"} as POST /api/runs takes it


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    kind: str  # chain, fanout, diamonds, wide, logs, foreach, behind
    runs: list[list[Step]]  # one step list per run submitted together
    runners: int
    lines: int = 0  # logs: lines the step prints
    accept_only: bool = False  # submit, time the acceptance, cancel (no execution)
    expands: int = 0  # foreach: the instances each run's loop adds to its steps
    # What the baseline runs in its place, where the steps are made as the run goes (a
    # loop's instances: the same fan-out, written out).
    baseline: list[list[Step]] | None = None

    @property
    def steps(self) -> int:
        return sum(len(r) + self.expands for r in self.runs)

    def documented(self) -> list[int]:
        """The steps each run's document lists once it has ended."""
        return [len(r) + self.expands for r in self.runs]


def _size(text: str) -> int:
    text = text.lower()
    if text.endswith("k"):
        return int(float(text[:-1]) * 1000)
    return int(text)


def chain(n: int, command: str = "true") -> list[Step]:
    steps: list[Step] = [{"id": "s000", "command": command}]
    for i in range(1, n):
        steps.append({"id": f"s{i:03d}", "command": command, "dependsOn": [f"s{i - 1:03d}"]})
    return steps


def fanout(n: int, command: str = "true") -> list[Step]:
    middle = [f"f{i:04d}" for i in range(n)]
    return [
        {"id": "root", "command": command},
        *({"id": m, "command": command, "dependsOn": ["root"]} for m in middle),
        {"id": "join", "command": command, "dependsOn": middle},
    ]


def diamond(command: str = "true") -> list[Step]:
    return [
        {"id": "A", "command": command},
        {"id": "B", "command": command, "dependsOn": ["A"]},
        {"id": "C", "command": command, "dependsOn": ["A"]},
        {"id": "D", "command": command, "dependsOn": ["B", "C"]},
    ]


def foreach(n: int, command: str = "true") -> list[Step]:
    """A root that writes ``items=[0,...,n-1]`` to its outputs, a step looping over it, and a
    join: a fan-out of n made when the root has run."""
    items = f"{{ printf 'items=['; seq -s, 0 {n - 1} | tr -d '\\n'; printf ']\\n'; }}"
    return [
        {"id": "root", "command": f'{items} >> "$HEDDLE_OUTPUTS"'},
        {
            "id": "each",
            "command": command,
            "dependsOn": ["root"],
            "forEach": "steps.root.outputs.items",
        },
        {"id": "join", "command": command, "dependsOn": ["each"]},
    ]


def wide(layers: int, width: int, command: str = "true") -> list[Step]:
    """Each step of layer l depends on two neighbours of layer l - 1 (one when width is 1)."""

    def sid(layer: int, i: int) -> str:
        return f"l{layer:03d}w{i:03d}"

    steps: list[Step] = [{"id": sid(0, i), "command": command} for i in range(width)]
    for layer in range(1, layers):
        for i in range(width):
            deps = sorted({sid(layer - 1, i), sid(layer - 1, (i + 1) % width)})
            steps.append({"id": sid(layer, i), "command": command, "dependsOn": deps})
    return steps


def make(name: str, accept_only: bool = False) -> Workload:
    """The workload a name stands for; ValueError for an unknown one. A name may end in
    ``:accept``: submitted, its acceptance timed, then cancelled rather than run."""
    if name.endswith(":accept"):
        name, accept_only = name.removesuffix(":accept"), True
    w = _make(name)
    if accept_only:
        w = dataclasses.replace(w, accept_only=True)
    return w


def _make(name: str) -> Workload:
    m = re.fullmatch(
        r"(chain|fanout|diamonds|wide|logs|foreach|behind)-([0-9.]+k?)(?:x([0-9]+))?", name
    )
    if not m:
        raise ValueError(
            f"unknown workload {name!r}: use chain-N, fanout-N, diamonds-N, wide-N "
            f"(a square-ish grid), wide-LxW, logs-N, foreach-N or behind-N"
        )
    kind, size, second = m.group(1), _size(m.group(2)), m.group(3)
    if size < 1:
        raise ValueError(f"workload {name!r}: size must be at least 1")
    if kind == "chain":
        return Workload(name, kind, [chain(size)], runners=4)
    if kind == "fanout":
        return Workload(name, kind, [fanout(size)], runners=8)
    if kind == "foreach":
        return Workload(
            name, kind, [foreach(size)], runners=8, expands=size, baseline=[fanout(size)]
        )
    if kind == "diamonds":
        return Workload(name, kind, [diamond() for _ in range(size)], runners=8)
    if kind == "behind":  # the big run first, the small one timed (harness.py)
        return Workload(name, kind, [fanout(size, "sleep 0.05"), diamond()], runners=4)
    if kind == "wide":
        if second:
            layers, width = size, int(second)
        else:
            width = max(round(size**0.5), 1)
            layers = max(size // width, 1)
        return Workload(name, kind, [wide(layers, width)], runners=8)
    return Workload(
        name, kind, [[{"id": "seq", "command": f"seq 1 {size}"}]], runners=4, lines=size
    )
