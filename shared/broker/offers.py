"""An assignment offered to one runner, a request on ``heddle.runner.<name>.assign``, and
what its answer means. The dispatchers' offers and the orchestrator's handoffs ask alike and
must read an answer alike: no responders means the offer never arrived; a timeout or an
undecodable reply means it may have arrived and only the answer was lost."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
from heddle.shared.broker.nats_types import NatsError, NoRespondersError
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AssignReply, assign_reply_decoder

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client


class Answer(enum.Enum):
    """How a runner answered an offer."""

    ACCEPTED = "accepted"
    REFUSED = "refused"  # busy or stopping: another runner is tried
    UNANSWERED = "unanswered"  # the offer may have arrived: checked before the next
    UNREACHED = "unreached"  # no runner listens on its subject: it never arrived


@dataclass(frozen=True, slots=True)
class Offered:
    answer: Answer
    reply: AssignReply | None = None  # the runner's, when it answered
    error: str | None = None  # why there is no answer: the exception's name


async def offer(nc: Client, runner: str, payload: bytes, timeout: float) -> Offered:
    """Offer the ready step ``payload`` to ``runner`` and wait up to ``timeout``."""
    try:
        msg = await nc.request(names.runner_assign(runner), payload, timeout=timeout)
        reply = assign_reply_decoder.decode(msg.data)
    except NoRespondersError as exc:
        return Offered(Answer.UNREACHED, error=type(exc).__name__)
    except (NatsError, TimeoutError, msgspec.DecodeError) as exc:
        return Offered(Answer.UNANSWERED, error=type(exc).__name__)
    return Offered(Answer.ACCEPTED if reply.accepted else Answer.REFUSED, reply)
