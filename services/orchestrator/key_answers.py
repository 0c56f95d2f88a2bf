"""A run's concurrency key, a part of the run's state machine (state.py): asking for it,
what the answer does, and the turn that comes for a run queued for it (docs/pools.md,
"Concurrency limits"). Giving it back is ``decisions.giving_back``. Pure: no I/O, no clock.

A run with a key is stored waiting, every step pending, with ``concurrency_wait`` set until
it holds the key; then it waits for its turn among the runs under way (admission.py), if it
must, as any run does. A run of a namespace with a runs-under-way quota takes that quota's
key too (``quota_wait`` until it holds it; docs/namespaces.md, "Quotas"), after its own:
every run takes them in that order, so none holds one while another waits for it in turn,
and a run's ``onLimit`` acts at once, before it waits for the quota.
"""

from __future__ import annotations

from collections.abc import Callable

from heddle.services.orchestrator.decisions import Effect, LeaveKey, PersistRun, TakeKey
from heddle.services.orchestrator.run_steps import RunSteps
from heddle.services.orchestrator.stopping import Stopping
from heddle.services.orchestrator.transitions import StepTransitions
from heddle.shared.core.namespaces import namespace_of
from heddle.shared.core.quotas import runs_key
from heddle.shared.wire.timefmt import from_epoch


def refusal(key: str, holder: str | None) -> str:
    """The reason of a run refused at its key's limit (``onLimit: refuse``)."""
    held = f" held by run {holder}" if holder else " at its limit"
    return f"refused: concurrency key {key}{held}"


class KeyAnswers:
    def __init__(
        self,
        records: RunSteps,
        transitions: StepTransitions,
        stopping: Stopping,
        admit: Callable[[float], list[Effect]],
    ) -> None:
        self.records = records
        self.transitions = transitions
        self.stopping = stopping
        self.admit = admit  # the run's first steps queued: its turn among the runs under way

    def asking(self) -> list[Effect]:
        """The take of the run's key, else of its namespace's quota, for a run waiting for
        it (new, resumed, or its turn come); nothing for any other. One past its deadline
        asks too: its exit handlers run once it holds them."""
        run = self.records.run
        if not run.waiting or self.records.done:
            return []
        if run.concurrency_key is not None and run.concurrency_wait is not None:
            key, limit, on_limit = run.concurrency_key, run.concurrency_limit, run.on_limit
            return [TakeKey(key, limit, on_limit, run.priority, admits=not run.quota_wait)]
        if run.quota_wait:
            quota = runs_key(namespace_of(run.run_id))
            return [TakeKey(quota, 0, "queue", run.priority, quota=True)]
        return []

    def on_key_taken(
        self, holds: bool, holder: str | None, refused: bool, admitted: bool, now: float
    ) -> list[Effect]:
        """The answer to ``TakeKey`` (messages.KeyTaken): held, and then its namespace's
        quota asked for, or ``admitted`` under way at once, or not; else queued behind
        ``holder``, or ``refused``. A run that ended meanwhile (cancelled while it waited)
        gives back what it got; one under way already is left as it is."""
        run = self.records.run
        key = run.concurrency_key
        if key is None:
            return []
        if self.records.done:
            return [LeaveKey(key)]
        if not run.waiting:
            return []
        if refused:
            return self._refused(key, holder, now)
        if holds:
            changed = run.concurrency_wait is not None or run.concurrency_holder is not None
            run.concurrency_wait = run.concurrency_holder = None
            if run.quota_wait:  # the quota next, asked once
                return [PersistRun(run), *self.asking()] if changed else []
            if admitted:
                return self.admit(now)
            return [PersistRun(run)] if changed else []
        if run.concurrency_wait is None or run.concurrency_holder == holder:
            return []  # held already (its answer came first), or nothing new to say
        run.concurrency_holder = holder
        return [PersistRun(run)]

    def on_quota_taken(
        self, holds: bool, holder: str | None, admitted: bool, now: float
    ) -> list[Effect]:
        """The answer to the take of the namespace's quota: held, and ``admitted`` under
        way at once or not; else queued behind ``holder``. A run that ended meanwhile gives
        back what it got."""
        run = self.records.run
        if self.records.done:
            return [LeaveKey(runs_key(namespace_of(run.run_id)), quota=True)]
        if not run.waiting:
            return []
        if holds:
            changed = run.quota_wait
            run.quota_wait, run.concurrency_holder = False, None
            if admitted:
                return self.admit(now)
            return [PersistRun(run)] if changed else []
        if not run.quota_wait or run.concurrency_holder == holder:
            return []  # held already (its answer came first), or nothing new to say
        run.concurrency_holder = holder
        return [PersistRun(run)]

    def on_key_free(self) -> list[Effect]:
        """The run's turn for its key has come: it asks again (a take that finds it holding
        or queued changes nothing)."""
        return self.asking()

    def _refused(self, key: str, holder: str | None, now: float) -> list[Effect]:
        """The run fails at once, having begun nothing: every step cancelled, the exit
        handlers with them, with the reason that says which run holds the key."""
        run = self.records.run
        run.reason = refusal(key, holder)
        run.concurrency_wait = run.concurrency_holder = None
        stamp = from_epoch(now)
        return [
            PersistRun(run),
            *self.stopping.stop(stamp, list(self.records.steps.values())),
            *self.transitions.maybe_finish(stamp),
        ]
