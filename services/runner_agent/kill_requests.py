"""Kill requests for the attempt a runner runs, believed only under that attempt's ticket.

Its own module: any user's JetStream request can have its reply (or a push consumer its
messages) delivered to a runner's cancel subject, so a request proves itself by the ticket
the orchestrator gave the attempt; this check, and saying once per attempt that a request
was ignored, is apart from taking assignments (assignments.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec
from heddle.services.runner_agent.continuations import AttemptKey
from heddle.shared.core import tickets
from heddle.shared.runtime.service import event
from heddle.shared.wire.contracts import CancelAttempt, cancel_attempt_decoder

if TYPE_CHECKING:
    from heddle.services.runner_agent.assignments import Assignments
    from heddle.shared.broker.nats_types import Msg

log = logging.getLogger("heddle.runner")


class KillRequests:
    def __init__(self, runner: str, assignments: Assignments) -> None:
        self.runner = runner
        self._assignments = assignments
        self._ignored: AttemptKey | None = None  # the attempt it last said so of

    async def on_cancel(self, msg: Msg) -> None:
        try:
            req = cancel_attempt_decoder.decode(msg.data)
        except msgspec.DecodeError:
            return
        cur = self._assignments.current
        key = (req.run_id, req.step_id, req.attempt)
        # A continuation dies with the attempt it follows: its runner went on before the
        # kill of that one arrived.
        if cur is None or key not in (cur.key, cur.after_key):
            return
        # The attempt's ticket shows the orchestrator sent it: any user's JetStream request
        # can have its reply (or a push consumer its messages) delivered to this subject.
        ticket = cur.ready.ticket if key == cur.key else cur.ready.after_ticket
        if not tickets.holds(ticket, req.ticket):
            if self._ignored != key:  # once per attempt: a flood is not a flood of lines
                self._ignored = key
                self._said("cancel ignored", req, "its ticket is not the attempt's")
            return
        self._said("kill requested", req, req.reason)
        if cur.process is not None:
            await cur.process.started.wait()
            cur.kill("cancelled", req.reason)

    def _said(self, what: str, req: CancelAttempt, reason: str) -> None:
        event(
            log,
            what,
            runner=self.runner,
            run=req.run_id,
            step=req.step_id,
            attempt=req.attempt,
            reason=reason,
        )
