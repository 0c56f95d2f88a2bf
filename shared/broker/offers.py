"""An assignment offered to one runner on ``heddle.runner.<name>.assign``, and what its
answer means. The dispatchers' offers and the orchestrator's handoffs go through a desk
(``OfferDesk``) and read an answer alike: no responders means the offer never arrived; a
timeout or an undecodable reply means it may have arrived and only the answer was lost.

An offer carries ``Heddle-Answer: outcome``: a runner whose step ends before its first
report sends no "accepted", and the step's ``finished`` event, which the offerer hears
anyway, answers it (docs/latency.md, "Answered by the outcome").
"""

from __future__ import annotations

import asyncio
import enum
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
from heddle.shared.broker.nats_types import NatsError, NoRespondersError
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AssignReply, StepFinished, assign_reply_decoder

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client, Msg

ANSWERED_BY_OUTCOME = {names.ANSWER_HEADER: names.ANSWER_BY_OUTCOME}
NO_RESPONDERS = "503"  # the server's status on a reply subject: no subscriber took it
# An offer awaiting its answer: the attempt it offers (run, step, attempt, ticket) and the
# runner it went to, which alone may answer it with its outcome.
OfferKey = tuple[str, str, int, str, str]
Answered = asyncio.Future["Offered"]


class Answer(enum.Enum):
    """How a runner answered an offer."""

    ACCEPTED = "accepted"
    REFUSED = "refused"  # busy or stopping: another runner is tried
    UNANSWERED = "unanswered"  # the offer may have arrived: checked before the next
    UNREACHED = "unreached"  # no runner listens on its subject: it never arrived


@dataclass(frozen=True, slots=True)
class Offered:
    answer: Answer
    reply: AssignReply | None = None  # the runner's, or made from the outcome that answered
    error: str | None = None  # why there is no answer: the exception's name


class OfferDesk:
    """One connection's offers awaiting their answers. Each goes out with a reply subject in
    the desk's own inbox; it is answered by the runner's reply, or by the ``finished`` event
    of its attempt from that runner (``heard``), whichever comes first."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.inbox = nc.new_inbox()
        self._by_token: dict[str, Answered] = {}  # as its reply names it
        self._by_key: dict[OfferKey, Answered] = {}  # as its outcome names it
        self._tokens = itertools.count()

    async def start(self) -> None:
        """Subscribed to its inbox: the replies come through the connection until it closes."""
        await self.nc.subscribe(f"{self.inbox}.*", cb=self._on_reply)

    async def offer(
        self, runner: str, payload: bytes, attempt: tuple[str, str, int, str], timeout: float
    ) -> Offered:
        """Offer the ready step ``payload`` (the ``attempt`` run, step, attempt and ticket)
        to ``runner``, and wait up to ``timeout`` for its answer or its outcome."""
        token = str(next(self._tokens))
        key = (*attempt, runner)
        answered: Answered = asyncio.get_running_loop().create_future()
        self._by_token[token] = self._by_key[key] = answered
        try:
            await self.nc.publish(
                names.runner_assign(runner),
                payload,
                reply=f"{self.inbox}.{token}",
                headers=ANSWERED_BY_OUTCOME,
            )
            return await asyncio.wait_for(answered, timeout)
        except (NatsError, TimeoutError) as exc:
            return Offered(Answer.UNANSWERED, error=type(exc).__name__)
        finally:
            del self._by_token[token]
            if self._by_key.get(key) is answered:
                del self._by_key[key]

    def heard(self, ev: StepFinished) -> None:
        """An outcome: the answer "accepted" of the offer of its attempt to its runner."""
        answered = self._by_key.get((ev.run_id, ev.step_id, ev.attempt, ev.ticket, ev.runner))
        if answered is not None and not answered.done():
            reply = AssignReply(accepted=True, runner=ev.runner, jobs=ev.jobs)
            answered.set_result(Offered(Answer.ACCEPTED, reply))

    async def _on_reply(self, msg: Msg) -> None:
        answered = self._by_token.get(msg.subject.rpartition(".")[2])
        if answered is None or answered.done():
            return  # too late: the offer was given up, or its outcome came first
        answered.set_result(_read(msg))


def _read(msg: Msg) -> Offered:
    """A reply to an offer; the server's "no responders" status means no runner listens on
    its subject."""
    if not msg.data and (msg.headers or {}).get("Status") == NO_RESPONDERS:
        return Offered(Answer.UNREACHED, error=NoRespondersError.__name__)
    try:
        reply = assign_reply_decoder.decode(msg.data)
    except msgspec.DecodeError as exc:
        return Offered(Answer.UNANSWERED, error=type(exc).__name__)
    return Offered(Answer.ACCEPTED if reply.accepted else Answer.REFUSED, reply)
