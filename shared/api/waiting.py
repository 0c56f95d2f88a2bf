"""How long a client waits for a run, decided without I/O: a run answered 202 (accepted, not
stored yet) may be unknown for a while, a gateway restarting may not answer for a while, and
the caller's timeout ends the wait. The sync and the async client's ``wait`` share it."""

from __future__ import annotations

from heddle.shared.api.answers import RunDocument
from heddle.shared.api.errors import ClientError, Refused, TimedOut, Unreachable
from heddle.shared.wire.contracts import TERMINAL_RUN

POLL_INTERVAL = 0.5  # seconds between reads of the run, where its events are not streamed
APPEAR_WAIT = 10.0  # a run answered 202 (accepted, not yet stored) may 404 this long
OUTAGE_WAIT = 10.0  # a gateway restarting may not answer this long before we give up


def is_over(run: RunDocument) -> bool:
    return run.status in TERMINAL_RUN


class Patience:
    """One wait for one run: what is borne, and how long is left (``now`` is monotonic)."""

    def __init__(self, run_id: str, timeout: float | None, now: float) -> None:
        self.run_id = run_id
        self.timeout = timeout
        self.deadline = None if timeout is None else now + timeout
        self.last_answer = now
        self.last: RunDocument | None = None  # the run as it was read last

    def answered(self, run: RunDocument, now: float) -> None:
        self.last, self.last_answer = run, now

    def bear(self, exc: ClientError, now: float) -> None:
        """Raise ``exc`` unless it is waited out: a run never seen that is not stored yet, or
        a gateway that does not answer, each for a while after the last answer."""
        quiet = now - self.last_answer
        if isinstance(exc, Refused) and exc.status == 404 and self.last is None:
            if quiet <= APPEAR_WAIT:
                return
        elif isinstance(exc, Unreachable) and quiet <= OUTAGE_WAIT:
            return
        raise exc

    def left(self, now: float) -> float | None:
        """Seconds left before the caller's timeout (None: no timeout); TimedOut once none."""
        if self.deadline is None or self.timeout is None:
            return None
        if now >= self.deadline:
            raise TimedOut(self.run_id, self.timeout, self.last)
        return self.deadline - now

    def pause(self, interval: float, now: float) -> float:
        """How long to sleep before the next read: ``interval``, or what is left if less."""
        left = self.left(now)
        return interval if left is None else min(interval, left)
