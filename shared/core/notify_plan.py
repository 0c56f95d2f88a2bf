"""When a run's end is delivered to its notify targets, and what each attempt leaves in its
record (docs/notifications.md): the records a run's end creates, whether one is due, its
claim by a gateway, and the record after an attempt. Pure: no I/O; times are passed in.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec
from heddle.shared.core.backoff import backoff
from heddle.shared.wire.contracts import (
    TERMINAL_RUN,
    Notification,
    NotifyAttempt,
    RunRecord,
)
from heddle.shared.wire.timefmt import epoch_of, from_epoch

# The longest wait between two attempts at one target.
BACKOFF_CAP = 600.0
# A claim outlasts the POST's own timeout by this much: the time to record its answer.
CLAIM_MARGIN = 5.0


@dataclass(frozen=True, slots=True)
class Policy:
    """The sender's settings: the POST's timeout, the backoff after the first failure, and
    how long after the run's end attempts go on."""

    timeout: float
    backoff_base: float
    retry_for: float


def due_notifications(run: RunRecord) -> list[Notification]:
    """The deliveries a run's end makes: one per target whose ``on`` names how it ended
    (none for a run not ended)."""
    if run.status not in TERMINAL_RUN:
        return []
    return [
        Notification(
            run_id=run.run_id,
            index=i,
            url=target.url,
            run_status=run.status,
            finished_at=run.finished_at or "",
        )
        for i, target in enumerate(run.notify)
        if run.status in target.on
    ]


def owed(
    runs: Iterable[RunRecord], now: float, within: float, is_live: Callable[[str], bool]
) -> list[Notification]:
    """The deliveries of the runs that ended within ``within`` seconds of ``now`` and are
    no actor's any more (a live one stores its own): what the retention sweep makes again
    if a crash kept them from being stored (services/orchestrator/notify_repair.py)."""
    out: list[Notification] = []
    for run in runs:
        if not run.notify or run.finished_at is None or is_live(run.run_id):
            continue
        if epoch_of(run.finished_at, 0.0) >= now - within:
            out.extend(due_notifications(run))
    return out


def due_at(n: Notification, now: float) -> float | None:
    """When a gateway may next claim ``n`` (epoch seconds): None once it is settled."""
    if n.state != "pending":
        return None
    at = epoch_of(n.next_at, now) if n.next_at else now
    if n.claimed_until:
        at = max(at, epoch_of(n.claimed_until, now))
    return at


def claimed(n: Notification, now: float, policy: Policy) -> Notification:
    """``n`` held by the gateway about to send it, for as long as an attempt can take."""
    until = from_epoch(now + policy.timeout + CLAIM_MARGIN)
    return msgspec.structs.replace(n, claimed_until=until)


def after_attempt(
    n: Notification,
    attempt: NotifyAttempt,
    now: float,
    policy: Policy,
    rand: Callable[[], float] = random.random,
) -> Notification:
    """``n`` once ``attempt`` is made: delivered on a 2xx; else pending until its next
    attempt after a backoff, or given up if that would come past ``retry_for`` after the
    run's end."""
    attempts = [*n.attempts, attempt]
    if attempt.status is not None and 200 <= attempt.status < 300:
        return msgspec.structs.replace(
            n, state="delivered", attempts=attempts, next_at=None, claimed_until=None
        )
    wait = backoff(len(attempts), policy.backoff_base, BACKOFF_CAP, rand)
    ended = epoch_of(n.finished_at, now) if n.finished_at else now
    if now + wait > ended + policy.retry_for:
        return msgspec.structs.replace(
            n, state="gave-up", attempts=attempts, next_at=None, claimed_until=None
        )
    return msgspec.structs.replace(
        n, attempts=attempts, next_at=from_epoch(now + wait), claimed_until=None
    )


def answer_error(status: int) -> str:
    """What an answer that is not a 2xx is recorded as."""
    if 300 <= status < 400:
        return f"answered {status}: redirects are not followed"
    return f"answered {status}"
