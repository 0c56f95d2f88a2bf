"""Following every key of a KV bucket for as long as a service runs: the current values,
then each change, and a fresh watch whenever one fails or ends.

The watch is iterated, not read with nats-py's ``updates(timeout)``: that wraps each read in
``asyncio.wait_for``, which on Python 3.11 can lose a cancellation and keep a stopping
service waiting for the next change (shared/runtime/tasks.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nats.js.kv import KeyValue

RESTART_AFTER_FAILURE = 0.5  # seconds
RESTART_AFTER_END = 0.1  # seconds; a watch ends when its subscription is closed


async def follow(
    kv: KeyValue,
    on_entry: Callable[[KeyValue.Entry], Awaitable[None]],
    *,
    what: str,
    log: logging.Logger,
    on_caught_up: Callable[[], None],
    on_restart: Callable[[], None] | None = None,
    keys: str = ">",
    **watch_options: Any,
) -> None:
    """Run until cancelled: the keys ``keys`` matches (every key by default). ``on_restart``
    is called before every (re)start of the watch,
    ``on_caught_up`` once each watch has replayed the current values, ``on_entry`` for each
    value and change. A failure is logged as "<what> watch failed" and the watch restarts."""
    while True:
        if on_restart is not None:
            on_restart()
        try:
            watcher = await kv.watch(keys, **watch_options)
            async for entry in watcher:
                if entry is None:
                    on_caught_up()
                else:
                    await on_entry(entry)
            await asyncio.sleep(RESTART_AFTER_END)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the watch must outlive any failure: it starts again
            log.warning("%s watch failed (%s); restarting", what, exc)
            await asyncio.sleep(RESTART_AFTER_FAILURE)
