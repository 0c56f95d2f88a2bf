"""The continuations a runner holds (docs/latency.md, "Continuing a chain").

A continuation follows one attempt as it was given to this runner, its ticket included, and
no other: one made for an offer this runner refused would otherwise follow the same attempt
handed to it afresh under a new ticket, and run with a ticket that no longer counts. The
orchestrator sends an offer and its continuations at once, so a continuation can arrive
before the offer of the attempt it follows: it waits here until then, a few at most. Pure:
no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from heddle.shared.wire.contracts import StepReady

AttemptKey = tuple[str, str, int]  # run, step, attempt
KEPT = 8  # early ones of attempts never offered here are forgotten, oldest first


class Holder(Protocol):
    """An attempt that may hold its continuation (runner_agent/attempt.py)."""

    ready: StepReady
    then: StepReady | None

    @property
    def key(self) -> AttemptKey: ...


class Continuations:
    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._early: OrderedDict[AttemptKey, StepReady] = OrderedDict()

    def hold(self, then: StepReady, current: Holder | None) -> None:
        """``then`` arrived: held by the attempt it follows if that one runs here now (under
        the ticket it names), else kept until that attempt is offered."""
        key = (then.run_id, then.after, then.after_attempt)
        if current is not None and current.key == key:
            if current.ready.ticket == then.after_ticket:
                current.then = then
            return
        self._early[key] = then
        self._early.move_to_end(key)
        while len(self._early) > self.kept:
            self._early.popitem(last=False)

    def of(self, attempt: Holder) -> StepReady | None:
        """The continuation that came with ``attempt``'s offer or before it, if it follows
        it as given."""
        ready = attempt.ready
        for then in (self._early.pop(attempt.key, None), ready.then):
            if (
                then is not None
                and (then.run_id, then.after, then.after_attempt) == attempt.key
                and then.after_ticket == ready.ticket
                and then.then is None
            ):
                return then
        return None
