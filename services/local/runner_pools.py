"""The runners `heddle up` starts: N of the default pool (``--runners``) and those of each
``--pool NAME=COUNT[:label,label][@namespace+namespace]``. Pure: no I/O.

A ``--pool`` pool's runners take the steps of the namespaces after its ``@`` alone (``@*``:
every namespace's), or, without one, of HEDDLE_POOL_NAMESPACES in heddle up's environment;
the default pool's runners take every namespace's (docs/namespaces.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.shared.core.labels import DEFAULT_POOL, MAX_RUNNER_LABELS, label_problems
from heddle.shared.core.pool_namespaces import pool_namespaces_problems

POOL_OPTION = re.compile(
    r"^(?P<name>[^=]+)=(?P<count>[^:@]+)(?::(?P<labels>[^@]*))?(?:@(?P<namespaces>.*))?$"
)
EVERY_NAMESPACE = "*"  # --pool gpu=1@*: every namespace, whatever heddle up's environment says


class PoolOptionError(ValueError):
    """A --pool value that cannot be used, with every problem."""


@dataclass(frozen=True, slots=True)
class RunnerSpec:
    name: str
    pool: str = DEFAULT_POOL
    labels: tuple[str, ...] = ()  # beside its pool's name (HEDDLE_RUNNER_LABELS)
    namespaces: tuple[str, ...] = ()  # the only ones whose steps it takes; none: every one
    # Runners before its pool's first: as root, runner-<pool>-<i> runs its steps as the
    # (offset + i)-th uid of HEDDLE_STEP_UIDS, no other runner's (services/runner_agent/
    # isolation.py gives runner <name>-<i> the i-th uid of the range it is given).
    uid_offset: int = 0

    def env(self, step_uids: str = "") -> dict[str, str]:
        """Its settings beside the others'; ``step_uids``: HEDDLE_STEP_UIDS, shifted by its
        offset (step_uids_of)."""
        # Always set: heddle up's own HEDDLE_POOL_NAMESPACES is not every runner's.
        out = {"HEDDLE_POOL_NAMESPACES": ",".join(self.namespaces)}
        if self.pool != DEFAULT_POOL or self.labels:
            out |= {"HEDDLE_RUNNER_POOL": self.pool, "HEDDLE_RUNNER_LABELS": ",".join(self.labels)}
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
    namespaces: tuple[str, ...] | None = None  # None: heddle up's HEDDLE_POOL_NAMESPACES


def parse_pool(text: str) -> PoolRequest:
    """One ``--pool NAME=COUNT[:a,b][@ns+ns]``; PoolOptionError naming every problem."""
    match = POOL_OPTION.match(text.strip())
    if match is None:
        raise PoolOptionError(
            f"--pool {text!r}: expected NAME=COUNT, NAME=COUNT:label,label or either "
            "followed by @namespace+namespace"
        )
    name, count_text = match["name"], match["count"]
    labels = tuple(x.strip() for x in (match["labels"] or "").split(",") if x.strip())
    namespaces = _namespaces(match["namespaces"])
    problems = [f"pool name: {p}" for p in label_problems([name], 1)]
    problems += label_problems(labels, MAX_RUNNER_LABELS - 1)
    if namespaces:
        problems += pool_namespaces_problems(namespaces)
    elif namespaces is not None and match["namespaces"].strip() != EVERY_NAMESPACE:
        problems.append(
            f"after '@': namespaces joined by '+', or {EVERY_NAMESPACE!r} for every one"
        )
    if not count_text.isdigit() or int(count_text) < 1:
        problems.append(f"COUNT {count_text!r} must be a whole number of at least 1")
    if name == DEFAULT_POOL:
        problems.append("the default pool's runners are --runners N")
    if problems:
        raise PoolOptionError(f"--pool {text!r}: " + "; ".join(problems))
    return PoolRequest(name, int(count_text), labels, namespaces)


def _namespaces(text: str | None) -> tuple[str, ...] | None:
    """The namespaces after a --pool's '@' (none for '@*'); None without an '@'."""
    if text is None:
        return None
    parts = [x.strip() for x in text.split("+")]
    return () if parts == [EVERY_NAMESPACE] or parts == [""] else tuple(parts)


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


def runner_specs(
    default_count: int, pools: Sequence[PoolRequest], namespaces: Sequence[str] = ()
) -> list[RunnerSpec]:
    """Every runner, named ``runner-<i>`` in the default pool, ``runner-<pool>-<i>`` in
    another, a pool's restricted to its own namespaces or else to ``namespaces`` (heddle
    up's HEDDLE_POOL_NAMESPACES); PoolOptionError if a pool is given twice."""
    seen = [p.name for p in pools]
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if twice:
        raise PoolOptionError(f"--pool given twice for {', '.join(twice)}")
    specs = [RunnerSpec(f"runner-{i}") for i in range(default_count)]
    for pool in pools:
        offset = len(specs)
        specs += [
            RunnerSpec(f"runner-{pool.name}-{i}", pool.name, pool.labels, served, offset)
            for i in range(pool.count)
            for served in (tuple(namespaces) if pool.namespaces is None else pool.namespaces,)
        ]
    return specs
