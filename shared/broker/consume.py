"""What a consumer's handler decided about a JetStream message, and the one place that
decision becomes an ack, a nak with a delay, an in-progress or a term.

Handlers return an ``Outcome`` (the continuous pull settles it, ``shared/broker/pull.py``), or keep
the message and settle it themselves once its work is stored (a run's actor, an assignment
in flight); none acknowledges by hand.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, assert_never

from nats.errors import Error as NatsError

if TYPE_CHECKING:
    from nats.aio.msg import Msg

log = logging.getLogger("heddle.nats")

# A handler that failed: the message comes back after this long, not at once in a hot loop.
RETRY_AFTER_FAILURE = 1.0  # seconds
# A message that arrived before what it is about (an event of a run whose submit is still
# being redelivered): asked again this soon, ...
NOT_YET_DELAY = 0.5  # seconds
# ... and this many deliveries, after which it is about nothing that will ever come.
NOT_YET_DELIVERIES = 30


class Outcome(enum.Enum):
    DONE = "ack"  # handled, or nothing to do: never again
    FAILED = "nak after a failure"  # redelivered after RETRY_AFTER_FAILURE
    NOT_YET = "nak, too early"  # redelivered after NOT_YET_DELAY
    WAITING = "in progress"  # still being worked on: the server waits a full ack_wait more
    REFUSED = "term"  # can never be handled (undecodable, not allowed): never again
    HELD = "held"  # kept by the handler, which settles it once its work is stored
    LEFT = "left"  # not answered: redelivered after ack_wait to whoever consumes next
    RETURNED = "nak"  # given back unhandled: redelivered at once to whoever consumes next


async def settle(msg: Msg, outcome: Outcome) -> None:
    """Tell the server ``outcome``. A reply lost with the connection is only logged: the
    server redelivers an unanswered message after ack_wait, and a handled one is handled
    again idempotently."""
    try:
        match outcome:
            case Outcome.DONE:
                await msg.ack()
            case Outcome.FAILED:
                await msg.nak(delay=RETRY_AFTER_FAILURE)
            case Outcome.NOT_YET:
                await msg.nak(delay=NOT_YET_DELAY)
            case Outcome.RETURNED:
                await msg.nak()
            case Outcome.WAITING:
                await msg.in_progress()
            case Outcome.REFUSED:
                await msg.term()
            case Outcome.HELD | Outcome.LEFT:
                pass
            case _:
                assert_never(outcome)
    except NatsError as exc:  # the connection's errors, or a message already answered
        log.warning("%s of %s not sent: %s", outcome.value, msg.subject, exc)


def redelivered(msg: Msg) -> bool:
    """Whether the server delivered this message before (to this consumer or another)."""
    return msg.metadata.num_delivered > 1


def too_early_for_good(msg: Msg) -> bool:
    """Whether a message that kept arriving too early has used up its NOT_YET_DELIVERIES."""
    return msg.metadata.num_delivered > NOT_YET_DELIVERIES
