"""The dispatchers' shared consumers of ready steps, and how long a message stays in one's hand."""

from __future__ import annotations

from heddle.shared.broker.nats_types import AckPolicy, ConsumerConfig
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

# Ready steps fetched beyond the free runners: a runner that frees up finds its next step
# already here, off the pull's round trip, and one pull request serves several steps. Few,
# because a step held here is not available to another dispatcher (docs/performance.md).
LOOKAHEAD = 6


# A message in hand this near its ack wait since its last touch is left, not offered: the
# server may be about to give it to another dispatcher (or has, to one that stood still).
HELD_LIMIT = 0.75


def ack_wait(settings: Settings) -> float:
    """A ready message in a dispatcher's hand goes back to the others this long after it was
    last touched: when the dispatcher died (SIGKILL, a lost pod), how long its steps wait. A
    message in hand is touched (in progress) every third of it while it waits for a runner,
    and before each offer after the first, so a live dispatcher never loses one it holds. At
    least twice HEDDLE_ASSIGN_TIMEOUT: one offer and the check after it fit within it."""
    return max(settings.ready_ack_wait, 2 * settings.assign_timeout)


def ready_durable(opening: bool = False, key: str = "") -> str:
    """The name of one of the dispatchers' shared durable consumers (ready_consumer)."""
    if key:
        return names.dispatcher_on_durable(key)
    return names.DISPATCHER_OPENING_DURABLE if opening else names.DISPATCHER_DURABLE


def ready_filter(opening: bool, key: str) -> str:
    if key:
        return names.step_ready_on(key)
    return names.STEP_READY_OPENING if opening else names.STEP_READY_UNDER_WAY


def ready_consumer(settings: Settings, opening: bool = False, key: str = "") -> ConsumerConfig:
    """One of the dispatchers' shared durable consumers of ready steps: for the default
    pool, of the steps of runs under way, or (``opening``) of the steps that open a run,
    served after those; and one for each set of labels (``key``) some runner has."""
    return ConsumerConfig(
        durable_name=ready_durable(opening, key),
        filter_subject=ready_filter(opening, key),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait(settings),
        max_ack_pending=-1,
    )
