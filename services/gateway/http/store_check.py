"""At submit and at register: while the store's free room is within its reserve
(HEDDLE_STORE_RESERVE_BYTES), a new run or workflow is refused with a 507 naming the store,
so that the room left goes to the runs under way (shared/core/store_space.py decides;
docs/storage.md).

The store's use is read at most once a HEDDLE_STORE_CHECK_INTERVAL, not once a submit. A
reading that fails lets the request through: the write itself is refused if there is no
room (a 507 all the same, errors.py), and a gateway must not refuse runs because a look-up
did not answer.
"""

from __future__ import annotations

import logging
import time
import weakref

from aiohttp import web
from heddle.services.gateway.http import answers
from heddle.services.gateway.http.errors import STORE_FULL_RETRY_AFTER
from heddle.services.gateway.http.keys import NATS, SETTINGS
from heddle.shared.broker.nats_types import Client, NatsError
from heddle.shared.broker.store_use import read_store_use
from heddle.shared.core.store_space import StoreUse, admits_new_run, refusal
from heddle.shared.runtime.settings import Settings

log = logging.getLogger("heddle.gateway")

# By connection (one per gateway): when the store's use was read, and what it was.
_read: weakref.WeakKeyDictionary[Client, tuple[float, StoreUse]] = weakref.WeakKeyDictionary()


async def store_refused(request: web.Request) -> web.Response | None:
    """The 507 of a new run or workflow while the store is within its reserve; None if it
    may go."""
    settings = request.app[SETTINGS]
    use = await _use(request.app[NATS], settings)
    if use is None or admits_new_run(use, settings.store_reserve_bytes):
        return None
    response = answers.error(507, refusal(use, settings.store_reserve_bytes))
    response.headers["Retry-After"] = STORE_FULL_RETRY_AFTER
    return response


async def _use(nc: Client, settings: Settings) -> StoreUse | None:
    now = time.monotonic()
    read = _read.get(nc)
    if read is None or now - read[0] >= settings.store_check_interval:
        try:
            use = await read_store_use(nc, settings.store_max_bytes, settings.nats_timeout)
        except (NatsError, TimeoutError) as exc:
            log.warning("the store's use could not be read: %s", exc)
            return None
        read = _read[nc] = (now, use)
    return read[1]
