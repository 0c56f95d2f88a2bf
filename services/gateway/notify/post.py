"""One attempt at a delivery: the run's summary POSTed to its target, and the attempt as
its record keeps it. Redirects are not followed: a target answers where it was named."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import aiohttp
from heddle.shared.core import signatures
from heddle.shared.core.notify_plan import answer_error
from heddle.shared.wire import names
from heddle.shared.wire.contracts import Notification, NotifyAttempt
from heddle.shared.wire.timefmt import now_rfc3339

if TYPE_CHECKING:
    from heddle.shared.wire.contracts import Notify

EVENT_HEADER = "X-Heddle-Event"
MAX_ERROR = 300  # characters of an error kept in the record


async def post(
    session: aiohttp.ClientSession,
    n: Notification,
    target: Notify,
    body: bytes,
    secret: str | None,
) -> NotifyAttempt:
    """POST ``body`` to the target; a target that must be signed and has no ``secret`` is
    not sent to (the attempt is the error)."""
    at = now_rfc3339()
    if target.secret and secret is None:
        return NotifyAttempt(at=at, error="no secret is made for this target yet")
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Heddle",
        signatures.HEDDLE_DELIVERY: names.notification_key(n.run_id, n.index),
        EVENT_HEADER: f"run.{n.run_status}",
    }
    if target.secret and secret is not None:
        headers[signatures.HEDDLE_HEADER] = signatures.sign(secret, body)
    try:
        # The answer's body is not read: its status is all a delivery needs.
        async with session.post(n.url, data=body, headers=headers, allow_redirects=False) as ans:
            status = ans.status
    except TimeoutError:
        return NotifyAttempt(at=at, error="no answer within HEDDLE_NOTIFY_TIMEOUT")
    except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as exc:
        return NotifyAttempt(at=at, error=_error(exc))
    if 200 <= status < 300:
        return NotifyAttempt(at=at, status=status)
    return NotifyAttempt(at=at, status=status, error=answer_error(status))


def _error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:MAX_ERROR]
