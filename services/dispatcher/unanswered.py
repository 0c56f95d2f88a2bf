"""The runner an offer went unanswered by, for one ready message in a dispatcher's hand.
Pure: no I/O; times are monotonic seconds.

A runner answers an offer once its first heartbeat is stored (docs/latency.md, "Making an
attempt known"), so one that stands still after it started the command, a frozen pod or a
starved process, gives no answer, and holds the attempt all the same. Offered to another
runner, the step would run twice. So that runner is asked again before any other: at least
once, then for as long as a running attempt's runner may be silent before it is judged
dead (HEDDLE_HEARTBEAT_INTERVAL x HEDDLE_HEARTBEAT_GRACE), and only while it is in the pool.
A runner that stood still before it read the offer refuses it when it wakes, at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Unanswered:
    runner: str = ""  # "" none: any runner may be offered the step
    since: float = 0.0  # when it was first offered the attempt
    asks: int = 0  # how often it was asked again since

    def went(self, runner: str, offered_at: float) -> None:
        """``runner`` gave no answer to the offer made at ``offered_at``."""
        if runner != self.runner:
            self.runner, self.since, self.asks = runner, offered_at, 0

    def clear(self) -> None:
        """It answered, refused, or cannot be reached: it does not hold the attempt."""
        self.runner, self.asks = "", 0

    def ask_again(self, now: float, silence_limit: float) -> str:
        """The runner to ask again now, counted as asked; "" once no runner is to be."""
        if not self.runner or (self.asks and now - self.since >= silence_limit):
            self.clear()
            return ""
        self.asks += 1
        return self.runner
