"""The runner pools (``HEDDLE_RUNNER_POOLS``, which the chart writes): parsed and checked, and
which pools could take a step. Pure: no I/O.

The setting is a JSON list, one object per pool: ``name``, ``labels`` (its runners' labels;
the pool's name is always one of them), ``statefulset`` (its StatefulSets' names are
``<statefulset><i>``, one single-replica StatefulSet per runner, its runner named after it),
``minReplicas``, ``maxReplicas``, ``autoscaling`` (whether the dispatcher scales it between
the two; a pool that does not has its fixed size as both) and ``namespaces`` (the only ones
whose steps its runners take, HEDDLE_POOL_NAMESPACES; none: every one). Empty: only the
default pool, as ``HEDDLE_AUTOSCALE_*`` and ``HEDDLE_RUNNER_STATEFULSET_PREFIX`` describe it. See
docs/scaling.md, "Runner pools".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from heddle.shared.core.labels import takes
from heddle.shared.core.pool_namespaces import pool_namespaces_problems

# A DNS label that starts with a letter: it goes into StatefulSet and NATS user names, and
# never ends a runner's name in digits of its own (runner-<pool>-<i> is read back by its tail).
POOL_NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")
LABEL = re.compile(r"[^\s,]+")  # HEDDLE_RUNNER_LABELS is comma-separated


class PoolSpec(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    name: str
    statefulset: str  # the prefix of its StatefulSets' names: <statefulset>0, <statefulset>1...
    labels: tuple[str, ...] = ()  # sorted, its name among them
    min_replicas: int = 0
    max_replicas: int = 0
    autoscaling: bool = False
    namespaces: tuple[str, ...] = ()


def parse_pools(text: str) -> list[PoolSpec]:
    """The pools of ``HEDDLE_RUNNER_POOLS`` ("" = none: only the default pool, unlisted).
    Raises ValueError naming every problem."""
    if not text.strip():
        return []
    try:
        doc = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise ValueError(f"HEDDLE_RUNNER_POOLS is not JSON: {exc}") from None
    if not isinstance(doc, list):
        raise ValueError("HEDDLE_RUNNER_POOLS must be a JSON list of pools")
    problems: list[str] = []
    pools: list[PoolSpec] = []
    for i, item in enumerate(doc):
        where = f"pool {i}" + (f" ({item['name']})" if _named(item) else "")
        try:
            pool = msgspec.convert(item, PoolSpec)
        except msgspec.ValidationError as exc:
            problems.append(f"{where}: {exc}")
            continue
        problems.extend(f"{where}: {p}" for p in _pool_problems(pool))
        labels = tuple(sorted({*pool.labels, pool.name}))
        pools.append(msgspec.structs.replace(pool, labels=labels))
    problems.extend(_clashes(pools))
    if problems:
        raise ValueError("HEDDLE_RUNNER_POOLS: " + "; ".join(problems))
    return pools


def pools_with_labels(pools: Iterable[PoolSpec], runs_on: Sequence[str]) -> list[PoolSpec]:
    """The pools whose runners could take a step asking for ``runs_on``: those with every
    label asked; with none asked, the default pool (shared/core/labels.py, ``takes``)."""
    return [p for p in pools if takes(p.name, p.labels, runs_on)]


def _named(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("name"), str)


def _pool_problems(pool: PoolSpec) -> list[str]:
    problems = []
    if not POOL_NAME.fullmatch(pool.name):
        problems.append(
            f"name {pool.name!r} must be lowercase letters, digits and '-', start with a "
            "letter, end with a letter or digit, at most 40 characters"
        )
    bad = [label for label in pool.labels if not LABEL.fullmatch(label)]
    if bad:
        problems.append(f"labels {bad} must be non-empty, without spaces or commas")
    if not pool.statefulset:
        problems.append("statefulset must not be empty")
    if not 0 <= pool.min_replicas <= pool.max_replicas:
        problems.append(
            f"needs 0 <= minReplicas <= maxReplicas, not {pool.min_replicas} and "
            f"{pool.max_replicas}"
        )
    if pool.autoscaling and pool.max_replicas < 1:
        problems.append("an autoscaling pool needs maxReplicas of 1 or more")
    problems.extend(f"namespaces: {p}" for p in pool_namespaces_problems(list(pool.namespaces)))
    return problems


def _clashes(pools: list[PoolSpec]) -> list[str]:
    """Two pools of one name, or of one StatefulSet prefix."""
    problems = []
    for what, key in (("name", "name"), ("statefulset", "statefulset")):
        seen: set[str] = set()
        for pool in pools:
            value = getattr(pool, key)
            if value in seen:
                problems.append(f"two pools with the {what} {value!r}")
            seen.add(value)
    return problems
