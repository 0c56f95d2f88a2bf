"""What HEDDLE_EVENTS holds about one step, read directly (a get of the last message on a
subject, no consumer): for the services that must not act on silence or on a repeated
message while a runner's outcome is already stored."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepFinished, event_decoder
from heddle.shared.wire.errors import OutcomeUnknown
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

if TYPE_CHECKING:
    from nats.js import JetStreamContext

log = logging.getLogger("heddle.nats")


async def last_outcome(
    js: JetStreamContext, run_id: str, step_id: str, runner: str | None = None
) -> StepFinished | None:
    """The step's last stored finished event (of any attempt; of ``runner``'s, or of any
    runner's); None if there is none. Raises ``OutcomeUnknown`` if the server could not
    say: a caller about to act on silence must not read that as "no outcome" (just after a
    broker restart, a read can fail while the outcome it looks for is stored)."""
    subject = (
        names.stored_evt(run_id, step_id, "finished", runner)
        if runner
        else names.evt_step_kind(run_id, step_id, "finished")
    )
    try:
        raw = await js.get_last_msg(names.EVENTS_STREAM, subject)
    except NotFoundError:
        return None
    except NatsError as exc:  # a timeout, no responders, a connection lost
        raise OutcomeUnknown(subject, exc) from exc
    try:
        ev = event_decoder.decode(raw.data or b"")
    except msgspec.DecodeError:
        log.warning("undecodable finished event on %s", subject)
        return None
    if not isinstance(ev, StepFinished) or ev.runner != names.evt_runner(raw.subject or ""):
        return None  # a runner speaks for itself alone (the orchestrator refuses it too)
    return ev
