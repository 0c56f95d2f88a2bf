"""The commands (HEDDLE_CMD) and runner events (HEDDLE_EVENTS) of the partitions held, each
taken to its run: a submit to submissions.py, anything else posted to the run's actor
(live_runs.py), which acknowledges it once the effects it caused are stored. A command or an
event whose subject and body disagree is refused: the subject is what the server checked."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, assert_never

import msgspec
from heddle.services.orchestrator.decisions import KillAttempt
from heddle.services.orchestrator.messages import Cancel, DeadlineTimer, GateDecided, RetryTimer
from heddle.shared.broker.consume import Outcome, too_early_for_good
from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    ApprovalDecision,
    CancelRun,
    ChildEnded,
    DeadlineDue,
    DecideApproval,
    RetryDue,
    StepEvent,
    StepFinished,
    StepStarted,
    SubmitRun,
    command_decoder,
    event_decoder,
)

if TYPE_CHECKING:
    from heddle.services.orchestrator.effects import Effects
    from heddle.services.orchestrator.live_runs import LiveRuns
    from heddle.services.orchestrator.submissions import Submissions
    from heddle.shared.broker.nats_types import Msg

log = logging.getLogger("heddle.orchestrator")


# What a command posts to its run's actor.
RunCommand = Cancel | RetryTimer | DeadlineTimer | ChildEnded | GateDecided


class Router:
    def __init__(
        self,
        runs: LiveRuns,
        submissions: Submissions,
        effects: Effects,
        heard: Callable[[StepFinished], None],
    ) -> None:
        self.runs = runs
        self.submissions = submissions
        self.effects = effects  # for the kill of a step whose run has ended
        self.heard = heard  # an outcome, as it arrives, answers its attempt's handoff

    async def on_command(self, msg: Msg) -> Outcome:
        try:
            cmd = command_decoder.decode(msg.data)
        except msgspec.DecodeError as exc:
            log.error("dropping undecodable command on %s: %s", msg.subject, exc)
            return Outcome.REFUSED
        if not isinstance(cmd, SubmitRun) and cmd.run_id != names.command_run(msg.subject):
            # The subject decides the partition: a body about another run is not its owner's.
            log.warning("command refused: it names run %r, its subject %s", cmd.run_id, msg.subject)
            return Outcome.REFUSED
        match cmd:
            case SubmitRun(document=None):
                return await self.submissions.submit(cmd, msg)
            case SubmitRun(document=ref):
                assert ref is not None  # the case above
                return await self.submissions.submit_carried(cmd, ref, msg)
            case CancelRun(run_id=run_id, reason=reason):
                # No actor: finished or unknown, and the gateway answered already.
                return self._post(run_id, Cancel(reason), msg)
            case RetryDue(run_id=run_id, step_id=step_id, attempt=attempt):
                return self._post(run_id, RetryTimer(step_id, attempt), msg)
            case DeadlineDue(run_id=run_id):
                # No actor: the run finished (or is unknown), and its deadline means nothing.
                return self._post(run_id, DeadlineTimer(), msg)
            case DecideApproval(run_id=run_id, step_id=step_id, attempt=attempt):
                # No actor: the run ended (its gate with it), or is unknown.
                return self._post(run_id, GateDecided(step_id, attempt, decision_of(cmd)), msg)

            case ChildEnded(run_id=run_id):
                # No actor: the parent ended (cancelled), and its child's end means nothing.
                return self._post(run_id, cmd, msg)
            case _:
                assert_never(cmd)

    def _post(
        self,
        run_id: str,
        message: Cancel | RetryTimer | DeadlineTimer | ChildEnded | GateDecided,
        msg: Msg,
    ) -> Outcome:
        """Held by the run's actor until its effects are stored; done at once if the run
        has no actor (finished, or unknown)."""
        return Outcome.HELD if self.runs.post(run_id, message, msg) else Outcome.DONE

    async def on_event(self, msg: Msg) -> Outcome:
        try:
            ev = event_decoder.decode(msg.data)
        except msgspec.DecodeError as exc:
            log.error("dropping undecodable event on %s: %s", msg.subject, exc)
            return Outcome.REFUSED
        if names.evt_runner(msg.subject) != ev.runner:
            # The server lets a runner publish under its own name alone: the subject is who
            # sent it, the body only what it claims.
            log.warning(
                "event refused: it names runner %r, its subject %s",
                ev.runner,
                msg.subject,
                extra={"fields": {"run": ev.run_id, "step": ev.step_id}},
            )
            return Outcome.REFUSED
        if isinstance(ev, StepFinished):
            self.heard(ev)
        if self.runs.post(ev.run_id, ev, msg):
            return Outcome.HELD
        if (status := self.runs.ended(ev.run_id)) is not None:
            reason = f"run is already {status}"
        elif await self.submissions.stored(ev.run_id) or too_early_for_good(msg):
            reason = "run not live"  # long finished, or never to be created
        else:
            return Outcome.NOT_YET  # not created yet: its submit is being redelivered
        event(log, "ignored", run=ev.run_id, step=ev.step_id, reason=reason)
        await self._fence(ev, reason)
        return Outcome.DONE

    async def _fence(self, ev: StepEvent, reason: str) -> None:
        """A step that started in a run that has ended is told to die. A short step's runner
        is unknown until it reports, so a run cancelled meanwhile could not kill it; a step
        still running at its report delay says where it runs, here."""
        if isinstance(ev, StepStarted):
            kill = KillAttempt(
                ev.runner, ev.step_id, ev.attempt, f"attempt does not count: {reason}", ev.ticket
            )
            await self.effects.apply(ev.run_id, [kill])


def decision_of(cmd: DecideApproval) -> ApprovalDecision:
    return ApprovalDecision(
        approved=cmd.approved, by=cmd.by, decided_at=cmd.decided_at, comment=cmd.comment
    )
