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
    consumer keeps requests outstanding instead (``shared/pull.py``)."""
    body = json.dumps({"batch": batch, "expires": int(expires * 1e9)}).encode()
    await nc.publish(next_subject(stream, consumer), body, reply=reply)
