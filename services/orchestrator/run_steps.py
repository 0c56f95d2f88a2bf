"""One run's records as the orchestrator holds them in memory, and what follows from them
alone: which steps wait for which, which have outputs, and a step's ready message. The run's
state machine (state.py) is made of this and of the parts that change it (transitions.py,
continuations.py, attempt_reports.py), each given this one object. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from heddle.shared.core.conditions import referenced_steps
from heddle.shared.core.dag import Graph, Readiness
from heddle.shared.core.expressions import Scope, make_scope
from heddle.shared.core.namespaces import namespace_of
from heddle.shared.core.quotas import steps_semaphore
from heddle.shared.core.step_env import (
    FAILED_STEPS,
    ITEM,
    ITEM_INDEX,
    RUN_STATUS,
    env_bytes,
    step_variables,
)
from heddle.shared.wire.contracts import (
    TERMINAL_STEP,
    RunRecord,
    RunStatus,
    StepReady,
    StepRecord,
)


@dataclass(frozen=True, slots=True)
class Policy:
    retry_base: float = 1.0
    retry_cap: float = 300.0
    default_timeout: float = 3600.0
    # The most bytes a ready message may take (the server's payload limit, less room for
    # headers); 0: unchecked. A step whose variables make it larger fails instead.
    max_ready_bytes: int = 0
    # A success hands the first step it readies to the runner that succeeded (HEDDLE_HANDOFF).
    handoff: bool = False
    # A step handed to a runner takes its chain successor along, to run there as soon as it
    # succeeds (HEDDLE_CONTINUE; docs/latency.md, "Continuing a chain").
    continuations: bool = False
    # The most items a step's forEach may give (HEDDLE_MAX_ITEMS); more fail the step.
    max_items: int = 10_000
    # The most steps of one run queued or running at once, asked each time (0: no bound;
    # HEDDLE_RUN_WINDOW): its other ready steps wait their turn here, so that a big run
    # leaves room in the queue for the others (docs/pools.md, "Fair turns").
    window: Callable[[], int] = lambda: 0
    # A namespace's running-steps quota (None: none), asked as each step is queued
    # (services/orchestrator/namespace_quotas.py; docs/namespaces.md, "Quotas").
    step_quota: Callable[[str], int | None] = lambda namespace: None
    # A namespace's runs-under-way quota (None: none), asked as each run comes.
    runs_quota: Callable[[str], int | None] = lambda namespace: None
    # The deepest a run's calls may nest (HEDDLE_MAX_CALL_DEPTH; docs/sub-workflows.md).
    max_call_depth: int = 10


class RunSteps:
    """A run, its steps by id, its graph and its counts, shared by the state machine's parts."""

    def __init__(
        self,
        run: RunRecord,
        steps: list[StepRecord],
        policy: Policy,
        rand: Callable[[], float],
        tickets: Callable[[], str],
    ) -> None:
        self.run = run
        # A forEach step's instances are stored before it is (loops.py): those of one whose
        # expansion a crash cut short are left out, and made again, by the same ids.
        expanded = {s.id for s in steps if s.instances is not None}
        steps = [s for s in steps if s.parent is None or s.parent in expanded]
        self.steps = {s.id: s for s in steps}
        # Instances are outside the graph: their step's loop queues them (loops.py).
        self.graph = Graph([(s.id, s.depends_on) for s in steps if s.parent is None])
        self.policy = policy
        self.rand = rand  # the retry backoff's jitter
        self.new_ticket = tickets
        self.terminal = sum(1 for s in steps if s.status in TERMINAL_STEP)
        # Exit handlers (``onExit``): started once every other step has ended.
        self.exits = [s.id for s in steps if s.on_exit and s.parent is None]
        self.main_left = sum(1 for s in steps if not s.on_exit and s.status not in TERMINAL_STEP)
        self.succeeded = {s.id for s in steps if s.status == "succeeded"}
        # Steps with a ``when``: decided once every parent has ended, however it ended.
        self.conditional = {s.id for s in steps if s.when is not None}
        ended = (s.id for s in steps if s.status in TERMINAL_STEP) if self.conditional else ()
        self.readiness = Readiness(self.graph, self.succeeded, ended, self.conditional)
        # Succeeded steps with outputs, and for each step queued so far the steps upstream
        # of it that have outputs (computed once per step, from its parents').
        self.with_outputs = {s.id for s in steps if s.outputs}
        self._upstream_outputs: dict[str, frozenset[str]] = {}
        # The steps queued or running, and the ready ones held back while the run's window
        # is full, in the order they became ready (kept in memory: a rebuild holds again).
        self.flying = {s.id for s in steps if s.status in ("queued", "running")}
        self.held: deque[str] = deque()

    @property
    def done(self) -> bool:
        return self.run.status != "running"

    @property
    def stopping(self) -> bool:
        """Whether the run is being stopped: cancelled, or past its deadline (its
        ``reason``). Nothing more starts; what ends is cancelled."""
        return self.run.cancel_requested or self.run.reason is not None

    @property
    def stop_reason(self) -> str:
        """Why a stopping run's steps are killed and cancelled: ``cancelled``, or the run's
        reason (``deadline: ...``)."""
        return "cancelled" if self.run.cancel_requested else self.run.reason or "cancelled"

    def window_full(self) -> bool:
        """Whether the run has as many steps queued or running as its window allows."""
        window = self.policy.window()
        return 0 < window <= len(self.flying)

    def quota_semaphore(self) -> str | None:
        """The implicit semaphore the run's steps take while its namespace has a
        running-steps quota; None (a look in a dict, nothing more) while it has none."""
        namespace = namespace_of(self.run.run_id)
        return None if self.policy.step_quota(namespace) is None else steps_semaphore(namespace)

    def landed(self, step: StepRecord) -> None:
        """``step`` is neither queued nor running any more: its place in the window frees."""
        self.flying.discard(step.id)

    def ended(self, step: StepRecord) -> None:
        """Count ``step`` as terminal (once, as it becomes so)."""
        self.flying.discard(step.id)
        self.terminal += 1
        if not step.on_exit:
            self.main_left -= 1

    def halted(self, step: StepRecord) -> bool:
        """Whether the run's stopping stops ``step``: a cancel or the deadline stops the
        workflow's steps and lets its exit handlers run; a second cancel stops those too."""
        return self.stopping and (not step.on_exit or self.run.exit_cancelled)

    def outcome(self, exits: bool = True) -> RunStatus:
        """What the run ends as: ``cancelled`` if it was cancelled, ``failed`` past its
        deadline or if a step failed that was not allowed to, ``succeeded`` otherwise (steps
        skipped by a condition harm nothing). Without its exit handlers (``exits`` False):
        ``HEDDLE_RUN_STATUS``, what they are told."""
        if self.run.cancel_requested:
            return "cancelled"
        if self.run.reason is not None:  # past its deadline, whatever its steps did
            return "failed"
        if len(self.succeeded) == len(self.steps):
            return "succeeded"
        failed = any(
            s.status == "failed" and not s.allow_failure and (exits or not s.on_exit)
            for s in self.steps.values()
        )
        return "failed" if failed else "succeeded"

    def main_steps(self) -> list[StepRecord]:
        """The workflow's steps, its exit handlers left out."""
        return [s for s in self.steps.values() if not s.on_exit]

    def exit_steps(self) -> list[StepRecord]:
        return [self.steps[s] for s in self.exits]

    def exit_env(self) -> dict[str, str]:
        """What an exit handler learns of the run, besides what every step does."""
        failed = [s.id for s in self.main_steps() if s.status == "failed"]
        return {RUN_STATUS: self.outcome(exits=False), FAILED_STEPS: ",".join(failed)}

    def ready_message(
        self, step: StepRecord, attempt: int | None = None, *, ahead: bool = False
    ) -> tuple[StepReady, str | None]:
        """The step's ready message for ``attempt`` (its current one if None), and why it
        cannot be sent (too large), if it cannot. ``ahead``: made before every step upstream
        has succeeded (a continuation), so what it learns of the outputs upstream is not
        kept for later."""
        run = self.run
        known = set(self._upstream_outputs) if ahead else None
        # An instance learns what its forEach step would have.
        upstream = self.outputs_upstream(step.id if step.parent is None else step.parent)
        if known is not None:
            for step_id in set(self._upstream_outputs) - known:
                del self._upstream_outputs[step_id]
        env = step_variables(
            params=run.params,
            scheduled_for=run.scheduled_for,
            scheduled_tz=run.scheduled_tz,
            run_env=run.env,
            step_env=step.env,
            outputs=[(s, self.steps[s].outputs) for s in upstream],
        )
        if step.on_exit:
            env = {**env, **self.exit_env()}
        if step.item is not None:
            env = {**env, ITEM: step.item, ITEM_INDEX: str(step.item_index)}
        ready = StepReady(
            run_id=run.run_id,
            step_id=step.id,
            attempt=step.attempt if attempt is None else attempt,
            command=step.command,
            timeout_seconds=step.timeout_seconds,
            ready_at=step.queued_at or "",
            requeue=step.requeues,
            ticket=step.ticket,
            env=env,
            runs_on=tuple(step.runs_on),
            priority=run.priority,
        )
        limit = self.policy.max_ready_bytes
        if limit and env:
            size = env_bytes(env) + len(step.command.encode()) + 512
            if size > limit:
                return ready, (
                    f"its environment (parameters, env and upstream outputs) makes its ready "
                    f"message about {size} bytes; the NATS server accepts up to {limit}"
                )
        return ready, None

    def outputs_upstream(self, step_id: str) -> list[str]:
        """The steps upstream of ``step_id`` (directly or not) that have outputs, in document
        order. Asked when the step is queued, when every one upstream has succeeded."""
        if not self.with_outputs:
            return []
        memo, parents, has = self._upstream_outputs, self.graph.parents, self.with_outputs
        todo = [step_id]
        while todo:
            node = todo[-1]
            missing = [p for p in parents[node] if p not in memo]
            if missing:
                todo.extend(missing)
                continue
            todo.pop()
            if node in memo:
                continue
            acc: frozenset[str] = frozenset()
            for p in parents[node]:
                carried = memo[p] | {p} if p in has else memo[p]
                acc = acc | carried if acc else carried
            memo[node] = acc
        return sorted(memo[step_id], key=self.graph.index.__getitem__)

    def condition_scope(self, step_id: str, text: str) -> Scope:
        """What ``text``, a step's ``when`` or ``forEach``, reads: the run's parameters and
        facts, and the status and outputs of the steps it names, which the workflow's check
        held to those upstream of the step (for an exit handler, any step of the workflow).
        Those alone: a scope of every step upstream would make a long chain's decisions
        cost its length squared. One not ended yet, possible past a skipped step, shows the
        status it has now."""
        run, steps = self.run, self.steps
        return make_scope(
            run.params,
            {
                s: (steps[s].status, steps[s].outputs)
                for s in referenced_steps(text)
                if s in steps and s != step_id
            },
            run_id=run.run_id,
            trigger=run.trigger,
            scheduled_for=run.scheduled_for,
            workflow=run.workflow_name or "",
        )

    def stale(self, step: StepRecord, attempt: int, runner: str) -> str | None:
        """Why an event of ``attempt`` from ``runner`` does not count, if it does not."""
        if step.status in TERMINAL_STEP:
            return f"step is already {step.status}"
        if attempt != step.attempt:
            return f"attempt {attempt} is not the current attempt {step.attempt}"
        if step.status in ("pending", "retrying"):
            return f"step is {step.status}"
        if step.status == "waiting":  # an approval gate: no runner's to report on
            return "step is an approval gate waiting, on no runner"
        if step.runner and runner != step.runner:
            return f"attempt {attempt} belongs to runner {step.runner}, not {runner}"
        return None

    @staticmethod
    def close_attempt(step: StepRecord, at: str, exit_code: int | None, reason: str | None) -> None:
        step.finished_at = at
        if step.attempts and step.attempts[-1].attempt == step.attempt:
            rec = step.attempts[-1]
            rec.finished_at = at
            rec.exit_code = exit_code
            rec.reason = reason
