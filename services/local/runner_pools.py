"""The runners `heddle up` starts: N of the default pool (``--runners``) and those of each
``--pool NAME=COUNT[:label,label]``. Pure: no I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.shared.core.labels import DEFAULT_POOL, MAX_RUNNER_LABELS, label_problems

POOL_OPTION = re.compile(r"^(?P<name>[^=]+)=(?P<count>[^:]+)(?::(?P<labels>.*))?$")


class PoolOptionError(ValueError):
    """A --pool value that cannot be used, with every problem."""


@dataclass(frozen=True, slots=True)
class RunnerSpec:
    name: str
    pool: str = DEFAULT_POOL
    labels: tuple[str, ...] = ()  # beside its pool's name (HEDDLE_RUNNER_LABELS)
    # Runners before its pool's first: as root, runner-<pool>-<i> runs its steps as the
    # (offset + i)-th uid of HEDDLE_STEP_UIDS, no other runner's (services/runner_agent/
    # isolation.py gives runner <name>-<i> the i-th uid of the range it is given).
    uid_offset: int = 0

    def env(self, step_uids: str = "") -> dict[str, str]:
        """Its settings beside the others'; ``step_uids``: HEDDLE_STEP_UIDS, shifted by its
        offset (step_uids_of)."""
        out: dict[str, str] = {}
        if self.pool != DEFAULT_POOL or self.labels:
            out = {"HEDDLE_RUNNER_POOL": self.pool, "HEDDLE_RUNNER_LABELS": ",".join(self.labels)}
        if self.uid_offset and step_uids:
            out["HEDDLE_STEP_UIDS"] = step_uids
        return out


def step_uids_of(uids: range, spec: RunnerSpec) -> str:
    """The HEDDLE_STEP_UIDS a runner is given: the range from its pool's first uid on, so
    that each runner's uid is its own; an empty range (FIRST above LAST) when the runners
    outnumber the uids, which the runner refuses, naming it."""
    return f"{uids.start + spec.uid_offset}-{uids.stop - 1}"


@dataclass(frozen=True, slots=True)
class PoolRequest:
    name: str
    count: int
    labels: tuple[str, ...] = ()


def parse_pool(text: str) -> PoolRequest:
    """One ``--pool NAME=COUNT[:a,b]``; PoolOptionError naming every problem."""
    match = POOL_OPTION.match(text.strip())
    if match is None:
        raise PoolOptionError(f"--pool {text!r}: expected NAME=COUNT or NAME=COUNT:label,label")
    name, count_text = match["name"], match["count"]
    labels = tuple(x.strip() for x in (match["labels"] or "").split(",") if x.strip())
    problems = [f"pool name: {p}" for p in label_problems([name], 1)]
    problems += label_problems(labels, MAX_RUNNER_LABELS - 1)
    if not count_text.isdigit() or int(count_text) < 1:
        problems.append(f"COUNT {count_text!r} must be a whole number of at least 1")
    if name == DEFAULT_POOL:
        problems.append("the default pool's runners are --runners N")
    if problems:
        raise PoolOptionError(f"--pool {text!r}: " + "; ".join(problems))
    return PoolRequest(name, int(count_text), labels)


def parse_pools(texts: Sequence[str]) -> list[PoolRequest]:
    """Every ``--pool`` given; PoolOptionError naming the problems of all of them."""
    pools, problems = [], []
    for text in texts:
        try:
            pools.append(parse_pool(text))
        except PoolOptionError as exc:
            problems.append(str(exc))
    if problems:
        raise PoolOptionError("; ".join(problems))
    return pools


def runner_specs(default_count: int, pools: Sequence[PoolRequest]) -> list[RunnerSpec]:
    """Every runner, named ``runner-<i>`` in the default pool, ``runner-<pool>-<i>`` in
    another; PoolOptionError if a pool is given twice."""
    seen = [p.name for p in pools]
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if twice:
        raise PoolOptionError(f"--pool given twice for {', '.join(twice)}")
    specs = [RunnerSpec(f"runner-{i}") for i in range(default_count)]
    for pool in pools:
        offset = len(specs)
        specs += [
            RunnerSpec(f"runner-{pool.name}-{i}", pool.name, pool.labels, offset)
            for i in range(pool.count)
        ]
    return specs
