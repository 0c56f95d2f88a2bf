"""What the streams already hold about one attempt, read before the orchestrator acts on
silence: an outcome stored but not yet seen here (waiting in this service's backlog after a
restart, or past a consumer that lost its place with a crashed broker) must win over a
verdict or a requeue."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from heddle.shared.broker.nats_types import NatsError
from heddle.shared.broker.stored_events import last_outcome
from heddle.shared.core import tickets
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepFinished

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import JetStreamContext

log = logging.getLogger("heddle.orchestrator")
# nats-server lists at most this many subjects in one stream-info answer and pages the
# rest, which the client does not ask for: a list that long cannot show what is missing.
SUBJECTS_PAGE = 100_000


async def stored_outcome(
    js: JetStreamContext,
    run_id: str,
    step_id: str,
    attempt: int,
    runner: str | None,
    ticket: str = "",
) -> StepFinished | None:
    """The attempt's finished event, if the stream holds it. With ``runner`` set, only that
    runner's counts (another runner's is from a redelivered assignment, which the state
    machine fences); with ``ticket`` set, only one that carries it. Raises
    ``OutcomeUnknown`` when the stream could not be read."""
    ev = await last_outcome(js, run_id, step_id, runner)
    if ev is None or ev.attempt != attempt:
        return None
    if not tickets.holds(ticket, ev.ticket):
        return None
    return ev


async def ready_steps(js: JetStreamContext, run_id: str) -> set[str] | None:
    """The steps of one run that have a ready message in HEDDLE_STEPS (waiting for a
    runner, or held by a dispatcher that has not acknowledged it): one stream-info request
    filtered to the run's ready subjects. None when the server could not say."""
    prefix = names.step_ready(run_id, "")
    try:
        info = await js.stream_info(names.STEPS_STREAM, subjects_filter=prefix + ">")
    except NatsError as exc:
        log.warning("listing the ready steps of run %s failed: %s", run_id, exc)
        return None
    subjects = info.state.subjects or {}
    if len(subjects) >= SUBJECTS_PAGE:
        return None
    return {names.ready_step_token(s[len(prefix) :]) for s in subjects}
