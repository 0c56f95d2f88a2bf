"""Whether a runner has a ready message's attempt already: the check before a message that
may have been placed before (redelivered, a second copy, after a reconnect) is offered."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import msgspec
from heddle.shared.broker.kv_reads import last_value_matching, value_of
from heddle.shared.broker.nats_types import NatsError
from heddle.shared.broker.stored_events import last_outcome
from heddle.shared.core import tickets
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    Heartbeat,
    StepFinished,
    StepReady,
    heartbeat_decoder,
    step_record_decoder,
)
from heddle.shared.wire.errors import OutcomeUnknown

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import JetStreamContext, KeyValue

log = logging.getLogger("heddle.dispatcher")


async def already_taken(js: JetStreamContext, runs_kv: KeyValue, ready: StepReady) -> bool:
    """Whether a runner accepted this attempt already: its heartbeat (stored before any
    answer that does not travel with the outcome) is there, or the step has moved past
    it, or a runner's outcome of it is stored (a short step's, or one whose heartbeat a
    broker lost, kept because the runner re-sends it until it lands).
    When in doubt, no: a step runs twice rather than never. The outcome is not looked
    for when the orchestrator queued the attempt again (``requeue``): it found none."""
    try:
        beat = await last_value_matching(
            js, names.HEARTBEATS_BUCKET, names.heartbeats_of_step(ready.run_id, ready.step_id)
        )
        with contextlib.suppress(msgspec.DecodeError):
            if beat and covers(heartbeat_decoder.decode(beat), ready):
                return True
        if ready.requeue == 0:
            outcome = await last_outcome(js, ready.run_id, ready.step_id)
            if outcome is not None and covers(outcome, ready):
                return True
        record = await value_of(runs_kv, names.step_key(ready.run_id, ready.step_id))
    except (NatsError, OutcomeUnknown) as exc:
        log.warning("checking %s/%s failed: %s", ready.run_id, ready.step_id, exc)
        return False
    try:
        step = step_record_decoder.decode(record or b"")
    except msgspec.DecodeError:
        return False
    if step.attempt != ready.attempt:
        return step.attempt > ready.attempt
    return step.status != "queued" or step.requeues > ready.requeue


def covers(seen: Heartbeat | StepFinished, ready: StepReady) -> bool:
    """Whether a heartbeat or an outcome shows this attempt (or a later one) taken: for
    this attempt, only one that carries its ticket, which no other runner knows."""
    if seen.attempt != ready.attempt:
        return seen.attempt > ready.attempt
    return tickets.holds(ready.ticket, seen.ticket)
