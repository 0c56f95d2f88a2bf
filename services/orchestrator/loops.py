"""A step's ``forEach`` (docs/workflows.md, "Loops"), a part of the run's state machine
(state.py): the step expands, once ready, into one instance per item of its list, steps of
the run ``<id>[0]``, ``<id>[1]``...; at most ``maxParallel`` of them are queued or running
at once; the step succeeds once every instance has, with their outputs gathered, and fails
as soon as one fails for good (the instances not started yet are skipped).

An expansion is stored instances first, then the run record, then the step's (running);
the ready messages of its first instances come after. A crash before the step's record
leaves it pending: the rebuilt run leaves its instances' records out (run_steps.py) and
expands it again, to the same ids, before any of them was sent to a runner.

Given the run's records (run_steps.py) and the step's transitions (transitions.py), which
hand an instance's success or failure for good here. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from heddle.services.orchestrator.decisions import Effect, PersistRun, PersistStep
from heddle.services.orchestrator.run_steps import RunSteps
from heddle.shared.core.expressions import (
    ExpressionError,
    compile_expression,
    evaluate_items,
    item_text,
)
from heddle.shared.wire.contracts import StepRecord, StepStatus
from heddle.shared.wire.names import instance_id

ACTIVE = ("queued", "running", "retrying")  # an instance that takes one of maxParallel's


class StepTransitions(Protocol):
    """What the loops ask of a step's transitions (transitions.py, which makes them)."""

    def queue(self, step: StepRecord, attempt: int, stamp: str) -> list[Effect]: ...

    def succeed(self, step: StepRecord, stamp: str) -> list[Effect]: ...

    def fail(self, step: StepRecord, reason: str, stamp: str, prev: str) -> list[Effect]: ...

    def terminate(
        self,
        step: StepRecord,
        status: StepStatus,
        reason: str,
        stamp: str,
        prev: str | None = None,
    ) -> list[Effect]: ...

    def end_downstream(self, origin: StepRecord, stamp: str) -> list[Effect]: ...

    def maybe_finish(self, stamp: str) -> list[Effect]: ...


@dataclass(slots=True)
class Tally:
    """Where a forEach step's loop stands: its first instance not queued yet, how many
    take a place of maxParallel's, how many have succeeded."""

    next: int
    active: int
    succeeded: int


class Loops:
    """The forEach steps of a run."""

    def __init__(self, records: RunSteps, transitions: StepTransitions) -> None:
        self.records = records
        self.transitions = transitions
        self.tallies: dict[str, Tally] = {}

    def instances(self, step: StepRecord) -> list[StepRecord]:
        steps = self.records.steps
        return [steps[instance_id(step.id, k)] for k in range(step.instances or 0)]

    def tally(self, step: StepRecord) -> Tally:
        """The loop's standing, counted from its instances' records once, then kept."""
        tally = self.tallies.get(step.id)
        if tally is None:
            found = self.instances(step)
            pending = [k for k, inst in enumerate(found) if inst.status == "pending"]
            tally = Tally(
                next=pending[0] if pending else len(found),
                active=sum(1 for inst in found if inst.status in ACTIVE),
                succeeded=sum(1 for inst in found if inst.status == "succeeded"),
            )
            self.tallies[step.id] = tally
        return tally

    # ---- expansion ----

    def expand(self, step: StepRecord, stamp: str) -> list[Effect]:
        """A forEach step now due: its list evaluated, its instances made, the first
        ``maxParallel`` of them queued. Fails the step if the list cannot be had (an
        evaluation error, too many items); succeeds it at once if the list is empty."""
        records, transitions = self.records, self.transitions
        prev = step.status
        try:
            items = evaluate_items(
                compile_expression(step.for_each or ""),
                records.condition_scope(step.id, step.for_each or ""),
                records.policy.max_items,
            )
        except ExpressionError as exc:
            step.started_at = stamp
            return transitions.fail(step, f"forEach {exc.problem}", stamp, prev)
        step.started_at = stamp
        step.instances = len(items)
        step.loop_outputs = {}
        if not items:
            return transitions.succeed(step, stamp)
        made: list[StepRecord] = []
        base = len(records.steps)
        for k, item in enumerate(items):
            inst = StepRecord(
                id=instance_id(step.id, k),
                command=step.command,
                index=base + k,
                retries=step.retries,
                timeout_seconds=step.timeout_seconds,
                env=step.env,
                allow_failure=step.allow_failure,
                on_exit=step.on_exit,
                runs_on=step.runs_on,
                semaphores=step.semaphores,  # each instance holds a slot of its own
                parent=step.id,
                item=item_text(item),
                item_index=k,
            )
            records.steps[inst.id] = inst
            if not inst.on_exit:
                records.main_left += 1
            made.append(inst)
        records.run.step_count = len(records.steps)
        step.status = "running"
        self.tallies[step.id] = Tally(next=0, active=0, succeeded=0)
        started = self.fill(step, stamp)
        # Every instance's record before the run's and the step's; the ready messages (and
        # whatever the first queued ones ended) after them.
        writes = [e for e in started if isinstance(e, PersistStep)]
        written = {e.step.id for e in writes}
        rest = [e for e in started if not isinstance(e, PersistStep)]
        return [
            *(PersistStep(inst, "new") for inst in made if inst.id not in written),
            *writes,
            PersistRun(records.run),
            PersistStep(step, prev),
            *rest,
        ]

    def fill(self, step: StepRecord, stamp: str) -> list[Effect]:
        """Instances queued, in order, while fewer than ``maxParallel`` take a place."""
        tally = self.tally(step)
        total = step.instances or 0
        cap = step.max_parallel or total
        effects: list[Effect] = []
        while step.status == "running" and tally.next < total and tally.active < cap:
            inst = self.records.steps[instance_id(step.id, tally.next)]
            tally.next += 1
            if inst.status != "pending":
                continue
            tally.active += 1
            effects.extend(self.transitions.queue(inst, inst.attempt + 1, stamp))
        return effects

    # ---- an instance's end ----

    def instance_succeeded(self, inst: StepRecord, stamp: str) -> list[Effect]:
        """An instance succeeded: the next one queued, and its step succeeded once every
        instance has."""
        records, transitions = self.records, self.transitions
        prev = inst.status
        inst.status = "succeeded"
        inst.reason = None
        records.ended(inst)
        records.succeeded.add(inst.id)
        effects: list[Effect] = [PersistStep(inst, prev)]
        step = records.steps[inst.parent or ""]
        if step.status == "running":
            tally = self.tally(step)
            tally.active -= 1
            tally.succeeded += 1
            effects.extend(self.fill(step, stamp))
            if tally.succeeded == step.instances:
                effects.extend(self._succeed(step, stamp))
        return effects + transitions.maybe_finish(stamp)

    def instance_failed(self, inst: StepRecord, reason: str, stamp: str, prev: str) -> list[Effect]:
        """An instance failed for good: its step fails, the instances not started yet are
        skipped, and what is downstream of the step is ended as for any failure."""
        transitions = self.transitions
        effects = transitions.terminate(inst, "failed", reason, stamp, prev)
        step = self.records.steps[inst.parent or ""]
        if step.status == "running":
            self.tally(step).active -= 1
            effects.extend(self._fail(step, f"instance {inst.id} failed: {reason}", stamp))
        return effects + transitions.maybe_finish(stamp)

    def _fail(self, step: StepRecord, reason: str, stamp: str) -> list[Effect]:
        transitions = self.transitions
        tally = self.tally(step)
        effects: list[Effect] = []
        why = f"skipped because step {step.id} failed"
        # Every instance not begun: those past the loop's place, and those the run's window
        # held back (transitions.release lets them go).
        for inst in self.instances(step):
            if inst.status == "pending":
                effects.extend(transitions.terminate(inst, "skipped", why, stamp))
        tally.next = step.instances or 0
        effects.extend(transitions.terminate(step, "failed", reason, stamp))
        return effects + transitions.end_downstream(step, stamp)

    def _succeed(self, step: StepRecord, stamp: str) -> list[Effect]:
        step.loop_outputs = gathered([inst.outputs for inst in self.instances(step)])
        step.finished_at = stamp
        return self.transitions.succeed(step, stamp)

    # ---- recovery ----

    def resume(self, stamp: str) -> list[Effect]:
        """A rebuilt run's loops carried on: each running forEach step's ends decided if a
        crash fell before they were stored, else its instances queued as maxParallel allows."""
        effects: list[Effect] = []
        running = [
            s
            for s in self.records.steps.values()
            if s.for_each is not None and s.status == "running" and s.instances is not None
        ]
        for step in running:
            found = self.instances(step)
            failed = next((i for i in found if i.status == "failed"), None)
            if failed is not None:
                reason = f"instance {failed.id} failed: {failed.reason}"
                effects.extend(self._fail(step, reason, stamp))
            elif all(i.status == "succeeded" for i in found):
                effects.extend(self._succeed(step, stamp))
            else:
                effects.extend(self.fill(step, stamp))
        return effects


def gathered(outputs: list[dict[str, str]]) -> dict[str, str]:
    """The instances' outputs as their forEach step's: for each key any of them wrote, a
    JSON array of their values in index order, null for an instance that wrote none."""
    keys: dict[str, None] = {}
    for out in outputs:
        keys.update(dict.fromkeys(out))
    return {
        key: json.dumps(
            [out.get(key) for out in outputs], separators=(",", ":"), ensure_ascii=False
        )
        for key in keys
    }
