"""Server-sent events as the client reads them: the lines of a stream made into events
(``EventLines``), a run's events and a followed log's decoded into the types the gateway
sends, and a run document kept current by its run's events (``Tracked``). Pure: the
transports feed it lines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec
from heddle.shared.api.answers import LineDoc, RunChange, RunDocument, RunEnd, StepChange
from heddle.shared.wire.contracts import StepStatus

E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event: its name (``message`` when it has none) and its data."""

    kind: str
    data: str


@dataclass(slots=True)
class EventLines:
    """Lines in, events out: an event ends at a blank line; comments (keepalives) and
    events without data are dropped."""

    kind: str = "message"
    data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> Event | None:
        line = line.rstrip("\r\n")
        if line.startswith(":"):
            return None  # a keepalive comment
        if not line:
            done = Event(self.kind, "\n".join(self.data)) if self.data else None
            self.kind, self.data = "message", []
            return done
        if line.startswith("event:"):
            self.kind = line[6:].strip()
        elif line.startswith("data:"):
            self.data.append(line[5:].removeprefix(" "))
        return None


# ---- a run's events (GET /api/runs/{run}/events) ------------------------------------------

RunEvent = StepChange | RunChange | RunEnd


def by_kind(decoders: dict[str, type[E]]) -> Callable[[Event], E | None]:
    """Decode an event into the type of its kind; None for a kind this client does not know
    (a newer gateway's)."""
    readers = {kind: msgspec.json.Decoder(decoded).decode for kind, decoded in decoders.items()}

    def decode(event: Event) -> E | None:
        read = readers.get(event.kind)
        return None if read is None else read(event.data)

    return decode


# A run's event as its type.
run_event: Callable[[Event], RunEvent | None] = by_kind(
    {"step": StepChange, "run": RunChange, "end": RunEnd}
)


class Tracked:
    """A run document kept current by its run's events."""

    def __init__(self, run: RunDocument) -> None:
        self.run = run
        self.steps = {step.id: step for step in run.steps}

    def apply(self, event: RunEvent) -> bool:
        """Bring the run up to ``event``; whether it changed (a step the document does not
        list, as a run's summary lists none, is left out)."""
        if isinstance(event, StepChange):
            step = self.steps.get(event.step_id)
            if step is None:
                return False
            for name in STEP_FIELDS:
                setattr(step, name, getattr(event, name))
        elif isinstance(event, RunChange):
            for name in RunChange.__struct_fields__:
                setattr(self.run, name, getattr(event, name))
        else:
            self.run.status, self.run.finished_at = event.status, event.finished_at
            self.run.counts = event.counts
        return True


STEP_FIELDS = tuple(name for name in StepChange.__struct_fields__ if name != "step_id")


# ---- a followed log (GET /api/runs/{run}/steps/{step}/logs?follow=1) ----------------------


class LogStatus(msgspec.Struct, rename="camel", kw_only=True):
    """``event: status``: the step's new state while its lines are followed."""

    status: StepStatus
    attempt: int


class LogEnd(msgspec.Struct, rename="camel", kw_only=True):
    """``event: end``: the step is over and its last line was sent; the stream ends."""

    status: StepStatus
    attempt: int
    exit_code: int | None = None
    reason: str | None = None
    finished_at: str | None = None
    cursor: int = 0  # pass as ``after`` to read what comes after (nothing, once it ended)


LogEvent = LineDoc | LogStatus | LogEnd
# A followed log's event as its type: a line, a status, the end.
log_event: Callable[[Event], LogEvent | None] = by_kind(
    {"message": LineDoc, "status": LogStatus, "end": LogEnd}
)
