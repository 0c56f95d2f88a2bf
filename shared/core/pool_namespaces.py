"""Runner pools restricted to namespaces: which runners take a step of which run, and why a
step no runner may take waits (docs/namespaces.md, "Runner pools for namespaces"). Pure:
no I/O.

A runner given namespaces (HEDDLE_POOL_NAMESPACES) takes only the steps of runs in them; one
given none takes every namespace's. A step's namespace is its run's (``namespace_of`` of the
qualified run id), so no message carries it apart.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Protocol

from heddle.shared.core.labels import parse_labels, runner_labels, takes
from heddle.shared.core.namespaces import namespace_of, namespace_problems
from heddle.shared.wire.contracts import SubmitRun
from heddle.shared.wire.errors import Problem


class RegisteredRunner(Protocol):
    """What a registry entry says of a runner's pool (contracts.RunnerInfo has it)."""

    @property
    def pool(self) -> str: ...

    @property
    def labels(self) -> Sequence[str]: ...

    @property
    def namespaces(self) -> Sequence[str]: ...


def parse_namespaces(text: str) -> list[str]:
    """HEDDLE_POOL_NAMESPACES: comma-separated, blanks ignored, as a runner's labels are;
    none is every namespace."""
    return parse_labels(text)


def pool_namespaces_problems(namespaces: Sequence[str]) -> list[str]:
    """Every problem with a runner's namespaces: each name's, and those given twice."""
    problems = [p.message for ns in namespaces for p in namespace_problems(ns)]
    repeated = sorted({ns for ns in namespaces if namespaces.count(ns) > 1})
    if repeated:
        problems.append(f"namespaces repeated: {', '.join(repeated)}")
    return problems


def serves(namespaces: Collection[str], run_id: str) -> bool:
    """Whether a runner restricted to ``namespaces`` (none: every one) takes a step of the
    run ``run_id`` (its stored, qualified id)."""
    return not namespaces or namespace_of(run_id) in namespaces


def takes_step(runner: RegisteredRunner, runs_on: Sequence[str], run_id: str) -> bool:
    """Whether ``runner`` takes a step of ``run_id`` asking for ``runs_on``: its labels
    (labels.takes) and its namespaces."""
    labels = runner_labels(runner.pool, runner.labels)
    return takes(runner.pool, labels, runs_on) and serves(runner.namespaces, run_id)


def namespace_refusal(
    runners: Iterable[RegisteredRunner], runs_on: Sequence[str], run_id: str
) -> str | None:
    """Why no runner may take a step of ``run_id`` asking for ``runs_on`` BECAUSE of
    namespaces: some runner has its labels, and every one that has them serves other
    namespaces only. None when one may take it, or when none has the labels (that is the
    labels' matter, not the namespaces')."""
    able = [r for r in runners if takes(r.pool, runner_labels(r.pool, r.labels), runs_on)]
    if not able or any(serves(r.namespaces, run_id) for r in able):
        return None
    by_pool: dict[str, set[str]] = {}
    for runner in able:
        by_pool.setdefault(runner.pool, set()).update(runner.namespaces)
    pools = ", ".join(
        f"pool {pool} serves namespace{'s' if len(ns) > 1 else ''} {', '.join(sorted(ns))} only"
        for pool, ns in sorted(by_pool.items())
    )
    return f"{pools}; this run is in namespace {namespace_of(run_id)}"


def submit_refusals(runners: Sequence[RegisteredRunner], cmd: SubmitRun) -> list[Problem]:
    """The steps of a submitted run (its exit handlers too) that no registered runner may
    take because of namespaces, each a problem naming the step, the pool and the namespace:
    the gateway refuses such a run (400). No runner restricted to namespaces: none, at the
    cost of one look at each runner."""
    if not any(r.namespaces for r in runners):
        return []
    problems = []
    for where, steps in (("steps", cmd.steps), ("onExit", cmd.on_exit)):
        for i, step in enumerate(steps):
            if (why := namespace_refusal(runners, step.runs_on, cmd.run_id)) is not None:
                problems.append(Problem(f"{where}[{i}].runsOn", f"step {step.id}: {why}"))
    return problems
