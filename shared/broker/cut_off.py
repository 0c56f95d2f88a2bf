"""Requests given up when their connection drops: the answer went with the connection, and
waiting out the request's timeout holds up whatever waits behind it (an orchestrator's lease
renewals: services/orchestrator/leases.py). No I/O of its own: the connection's disconnect
handler calls ``dropped``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from heddle.shared.wire.errors import AcknowledgementLost

T = TypeVar("T")


class CutOff:
    def __init__(self) -> None:
        self._cut = asyncio.Event()  # set (and replaced) when the connection drops

    def dropped(self) -> None:
        """The connection dropped: every request waiting in ``unless_dropped`` gives up."""
        cut, self._cut = self._cut, asyncio.Event()
        cut.set()

    async def unless_dropped(self, request: Awaitable[T], key: str) -> T:
        """``request``'s answer (a request about ``key``); AcknowledgementLost if the
        connection drops while it waits."""
        answer = asyncio.ensure_future(request)
        dropped = asyncio.ensure_future(self._cut.wait())
        try:
            await asyncio.wait((answer, dropped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            dropped.cancel()
            if not answer.done():
                answer.cancel()  # done at its next step: not yet below
        if not answer.done() or answer.cancelled():
            raise AcknowledgementLost(key)
        return answer.result()
