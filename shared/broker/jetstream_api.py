"""JetStream API calls that nats-py has no public function for, sent on the connection with
what they need passed in, never read from a client's private attributes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nats.aio.client import Client


def next_subject(stream: str, consumer: str) -> str:
    return f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"


async def request_next(
    nc: Client, stream: str, consumer: str, reply: str, batch: int, expires: float
) -> None:
    """Ask a pull consumer for up to ``batch`` messages, delivered to ``reply`` as they come;
    after ``expires`` seconds the server ends the request with a 408 status message that
    says how many it still owed (header ``Nats-Pending-Messages``).

    The request is ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` with a JSON body
    ``{"batch": n, "expires": nanoseconds}``: NATS's JetStream API reference, "Fetching
    Messages From a Pull Consumer" (ADR-13, Pull Subscribe internals). nats-py's
    ``fetch(n)`` sends the same request but returns only once ``n`` messages came or its
    timeout passed, and awaits every batch before the next is asked for: a continuous
    consumer keeps requests outstanding instead (``shared/broker/pull.py``)."""
    body = json.dumps({"batch": batch, "expires": int(expires * 1e9)}).encode()
    await nc.publish(next_subject(stream, consumer), body, reply=reply)


class ConsumerResetFailed(Exception):
    def __init__(self, stream: str, consumer: str, error: object) -> None:
        super().__init__(f"resetting consumer {consumer} of {stream} failed: {error}")
        self.stream, self.consumer, self.error = stream, consumer, error


async def reset_consumer(nc: Client, stream: str, consumer: str, timeout: float = 5.0) -> int:
    """Forget every delivery of a durable consumer: what was delivered and not acknowledged
    (to a process that died) is delivered again at once, not after its ack wait. Returns the
    stream sequence delivery starts again from.

    The request is ``$JS.API.CONSUMER.RESET.<stream>.<consumer>`` with an empty body, which
    resets to the consumer's ack floor (ADR-60, nats-server 2.14+); messages acknowledged
    above the floor come again too. nats-py has no call for it."""
    reply = await nc.request(f"$JS.API.CONSUMER.RESET.{stream}.{consumer}", b"", timeout=timeout)
    answer = json.loads(reply.data or b"{}")
    if "error" in answer:
        raise ConsumerResetFailed(stream, consumer, answer["error"])
    return int(answer.get("reset_seq", 0))
