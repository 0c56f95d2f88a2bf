"""Why a step or a run waits (pure): from the run's records and a snapshot of the facts (the
runners' registry entries, the semaphores its waiting steps name, how many waiting runs of
higher priority are ahead of it), a ``WaitingFor`` per waiting step and for the run
(docs/api.md, "Why a step waits").

The gateway reads each fact only when a record asks for it (``needs_registry``,
``semaphores_waited``), so a run document with nothing waiting costs no more than before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from heddle.shared.api.answers import WaitingFor
from heddle.shared.core.labels import DEFAULT_POOL
from heddle.shared.core.namespaces import namespace_of, own_name
from heddle.shared.core.pool_namespaces import namespace_refusal, takes_step
from heddle.shared.core.quotas import UNLIMITED, quota_namespace
from heddle.shared.core.semaphores import DEFAULT_SIZE
from heddle.shared.wire.contracts import (
    TERMINAL_RUN,
    ConcurrencyKey,
    RunnerInfo,
    RunRecord,
    StepRecord,
)


@dataclass(frozen=True)
class Semaphore:
    """A semaphore's document (``heddle-semaphores/<name>``) as far as it could be read."""

    size: int | None = None
    holders: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WaitFacts:
    runners: list[RunnerInfo] = field(default_factory=list)
    semaphores: dict[str, Semaphore] = field(default_factory=dict)
    priority_ahead: int = 0  # waiting runs of higher priority ahead of this one
    # The key of the namespace's runs-under-way quota, for a run waiting for it.
    runs_quota: ConcurrencyKey | None = None


@dataclass(frozen=True)
class Waits:
    steps: dict[str, WaitingFor]
    run: WaitingFor | None


def needs_registry(steps: list[StepRecord]) -> bool:
    """Whether a step waits for a runner (queued, not handed to one): only then is the
    registry read."""
    return any(s.status == "queued" and s.offered_to is None for s in steps)


def semaphores_waited(steps: list[StepRecord]) -> list[str]:
    """The semaphores the run's pending steps wait for, each once, sorted."""
    return sorted({s.semaphore_wait for s in steps if s.status == "pending" and s.semaphore_wait})


def waits(run: RunRecord, steps: list[StepRecord], facts: WaitFacts) -> Waits:
    if run.status in TERMINAL_RUN:
        return Waits({}, None)
    found = {s.id: w for s in steps if (w := step_waiting(s, facts, run.run_id)) is not None}
    if not run.waiting:
        found.update(held_back(steps))
    if run.quota_wait and not run.concurrency_wait:  # its own key first
        return Waits(found, runs_quota_full(run, facts.runs_quota or ConcurrencyKey()))
    return Waits(found, run_waiting(run, steps, found, facts.priority_ahead))


def held_back(steps: list[StepRecord]) -> dict[str, WaitingFor]:
    """The pending steps whose dependencies have all succeeded while the run has steps queued
    or running: held back by the run's window (docs/pools.md, "Fair turns")."""
    # Neither a forEach step (its instances count) nor a call step (docs/sub-workflows.md)
    # takes a place in the window.
    flying = sum(
        1
        for s in steps
        if s.status in ("queued", "running") and s.for_each is None and s.workflow is None
    )
    if not flying:
        return {}
    succeeded = {s.id for s in steps if s.status == "succeeded"}
    return {
        s.id: WaitingFor(
            reason="turn",
            sentence=(
                f"Its run's turn: {flying} of the run's steps are queued or running, as many "
                "as a run has at once (HEDDLE_RUN_WINDOW); it goes as they end."
            ),
            total=flying,
        )
        for s in steps
        if s.status == "pending"
        and not s.semaphore_wait
        and s.when is None
        and s.parent is None
        and not s.on_exit
        and all(d in succeeded for d in s.depends_on)
    }


def step_waiting(step: StepRecord, facts: WaitFacts, run_id: str = "") -> WaitingFor | None:
    """Why ``step`` of the run ``run_id`` (stored, qualified; "" a default namespace's)
    waits, or None."""
    if step.status == "retrying" and step.retry_at:
        return backoff(step)
    if step.status == "waiting" and step.approval is not None:
        return gate_waiting(step)
    if step.status == "pending" and step.semaphore_wait:
        name = step.semaphore_wait
        sem = facts.semaphores.get(name, Semaphore())
        namespace = quota_namespace(name)
        return semaphore_full(name, sem) if namespace is None else quota_full(namespace, sem)
    if step.status == "queued" and step.offered_to is None:
        return runner_wait(step, facts.runners, run_id)
    return None


def run_waiting(
    run: RunRecord, steps: list[StepRecord], step_waits: dict[str, WaitingFor], ahead: int
) -> WaitingFor | None:
    """The run's own wait (its turn, a concurrency key), else, while none of its steps runs,
    what its first waiting step waits for."""
    if run.status in TERMINAL_RUN:
        return None
    if run.concurrency_wait:
        held = f", held by run {run.concurrency_holder}" if run.concurrency_holder else ""
        return WaitingFor(
            reason="concurrency",
            sentence=f"Waits for concurrency key {run.concurrency_wait}{held}.",
            key=run.concurrency_wait,
            held_by=run.concurrency_holder,
        )
    if run.waiting:
        if ahead > 0:
            runs = "run" if ahead == 1 else "runs"
            return WaitingFor(
                reason="priority",
                sentence=f"Behind {ahead} waiting {runs} of higher priority.",
                ahead=ahead,
            )
        return WaitingFor(
            reason="runs-at-limit",
            sentence="Waiting for its turn: the runs under way are at their limit.",
        )
    if any(s.status == "running" for s in steps):
        return None
    first = next((s for s in steps if s.id in step_waits), None)
    if first is None:
        return None
    why = step_waits[first.id]
    return msgspec.structs.replace(why, sentence=f"Step {first.id}: {why.sentence}")


def gate_waiting(step: StepRecord) -> WaitingFor:
    """An approval gate waiting for its answer (docs/approvals.md)."""
    assert step.approval is not None  # a gate's alone
    timeout = step.approval.timeout_seconds
    until = f"; it fails after {timeout:g} s without one" if timeout is not None else ""
    return WaitingFor(
        reason="approval",
        sentence=f"Waits for an operator to approve or reject it{until}.",
        message=step.approval.message,
    )


def backoff(step: StepRecord) -> WaitingFor:
    return WaitingFor(
        reason="backoff",
        sentence=(
            f"Attempt {step.attempt} failed; attempt {step.attempt + 1} of {step.retries + 1} "
            f"starts after its backoff, at {step.retry_at}."
        ),
        until=step.retry_at,
    )


def semaphore_full(name: str, sem: Semaphore) -> WaitingFor:
    held = ""
    if sem.holders:
        held = f", held by {', '.join(sem.holders)}"
    size = f" (all {sem.size} slots)" if sem.size is not None else ""
    return WaitingFor(
        reason="semaphore",
        sentence=f"Semaphore {name} is full{size}{held}.",
        semaphore=name,
        holders=list(sem.holders),
    )


def quota_full(namespace: str, sem: Semaphore) -> WaitingFor:
    """A step waiting for its namespace's running-steps quota (its implicit semaphore)."""
    running = f" ({len(sem.holders)} running)" if sem.holders else ""
    size = DEFAULT_SIZE if sem.size is None else sem.size  # a size of 1 is stored unsaid
    quota = size if size < UNLIMITED else None
    at = f" of {quota}" if quota is not None else ""
    return WaitingFor(
        reason="quota",
        sentence=f"Namespace {namespace} is at its quota{at} of running steps{running}.",
        namespace=namespace,
        quota=quota,
        holders=list(sem.holders),
    )


def runs_quota_full(run: RunRecord, doc: ConcurrencyKey) -> WaitingFor:
    """A run waiting for its namespace's runs-under-way quota (its implicit key)."""
    namespace = namespace_of(run.run_id)
    quota = doc.limit if doc.key and doc.limit < UNLIMITED else None
    at = f"of {quota} run{'' if quota == 1 else 's'}" if quota is not None else "of runs"
    holders = [own_name(h) for h in doc.holders]
    held = f", held by run{'' if len(holders) == 1 else 's'} {', '.join(holders)}"
    return WaitingFor(
        reason="quota",
        sentence=f"Namespace {namespace} is at its quota {at} under way{held if holders else ''}.",
        namespace=namespace,
        quota=quota,
        holders=holders,
    )


def runner_wait(step: StepRecord, runners: list[RunnerInfo], run_id: str) -> WaitingFor | None:
    """A queued step: no runner could take it (its labels, or its run's namespace), or every
    one that could is busy; None while one is free (the step is being handed to it) or one
    holds it already."""
    if any(
        r.run_id is not None and r.step_id == step.id and r.attempt == step.attempt for r in runners
    ):
        return None
    able = [r for r in runners if takes_step(r, step.runs_on, run_id)]
    labels = sorted(step.runs_on) or None
    if not able and (why := namespace_refusal(runners, step.runs_on, run_id)) is not None:
        return WaitingFor(
            reason="no-runner",
            sentence=f"No runner may take it: {why}.",
            pool=DEFAULT_POOL if not labels else None,
            labels=labels,
        )
    pools = sorted({r.pool for r in able})
    pool = pools[0] if len(pools) == 1 else (None if labels else DEFAULT_POOL)
    whose = f"with labels {', '.join(labels)}" if labels else f"of pool {DEFAULT_POOL}"
    if not able:
        return WaitingFor(
            reason="no-runner",
            sentence=f"No runner {whose} is registered.",
            pool=None if labels else DEFAULT_POOL,
            labels=labels,
        )
    busy = sum(1 for r in able if r.status == "busy")
    if busy < len(able):
        return None
    return WaitingFor(
        reason="runners-busy",
        sentence=f"Every runner {whose} is busy ({busy} of {len(able)}).",
        pool=pool,
        busy=busy,
        total=len(able),
        labels=labels,
    )


def semaphore_of(raw: bytes | None) -> Semaphore:
    """A semaphore's stored document, read leniently: ``size`` and its ``holders`` (names, or
    records of a run and a step)."""
    if not raw:
        return Semaphore()
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return Semaphore()
    if not isinstance(doc, dict):
        return Semaphore()
    size = doc.get("size")
    held = doc.get("holders") or []
    if isinstance(held, dict):
        held = list(held)
    holders = [_holder(h) for h in held] if isinstance(held, list) else []
    return Semaphore(size if isinstance(size, int) else None, holders)


def _holder(h: Any) -> str:
    if isinstance(h, dict):
        run = h.get("runId", h.get("run_id"))
        step = h.get("stepId", h.get("step_id"))
        if run and step:
            return f"{run}/{step}"
        return str(run or step or h)
    return str(h)
