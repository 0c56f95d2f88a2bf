"""Connections that hold a file descriptor without a token, and how long and how many.

aiohttp has no header-read timeout: a client that sends a request line and some headers and
then nothing keeps its connection (and a descriptor) until aiohttp's keep-alive timeout, an
hour in 3.14, forever in older versions. So every gateway connection is watched here:

- **Header timeout.** Its first request's line and headers must be complete within
  ``HEDDLE_HEADER_TIMEOUT`` of its opening, else it is closed without an answer. Later
  requests come only on connections that showed a token (see the next point), and are left
  to aiohttp's keep-alive timeout, so that the gateway never closes an idle connection a
  reverse proxy is about to reuse.
- **Unauthenticated bound.** A connection counts as unauthenticated until a request on it
  passes the token check (with ``HEDDLE_AUTH=none``: until the middleware lets a request
  through). At most ``HEDDLE_MAX_UNAUTHENTICATED`` of them are kept: one more closes the
  *oldest*. Refusing the newest instead would let a few hundred stalled connections, renewed
  every header timeout, shut every client out; dropping the oldest makes an attacker open
  connections faster than a client sends its request head to keep it out.
- **One answer without a token.** An answer on a still unauthenticated connection closes it
  (``Connection: close``), so such a connection never idles in keep-alive: it lives one
  header timeout and one request at most.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from aiohttp import web


class ConnectionGuard:
    """One server's timers and its unauthenticated connections, oldest first."""

    def __init__(self, header_timeout: float, max_unauthenticated: int) -> None:
        self.header_timeout = header_timeout
        self.max_unauthenticated = max_unauthenticated
        self._timers: dict[web.RequestHandler, asyncio.TimerHandle] = {}
        self._unauthenticated: OrderedDict[web.RequestHandler, None] = OrderedDict()

    def opened(self, conn: web.RequestHandler) -> None:
        loop = asyncio.get_running_loop()
        self._timers[conn] = loop.call_later(self.header_timeout, conn.force_close)
        self._unauthenticated[conn] = None
        while len(self._unauthenticated) > self.max_unauthenticated:
            oldest, _ = self._unauthenticated.popitem(last=False)
            oldest.force_close()

    def head_complete(self, conn: web.RequestHandler) -> None:
        timer = self._timers.pop(conn, None)
        if timer is not None:
            timer.cancel()

    def authenticated(self, conn: web.RequestHandler) -> None:
        self._unauthenticated.pop(conn, None)

    def is_authenticated(self, conn: web.RequestHandler) -> bool:
        return conn not in self._unauthenticated

    def closed(self, conn: web.RequestHandler) -> None:
        self.head_complete(conn)
        self._unauthenticated.pop(conn, None)


class GuardedHandler(web.RequestHandler):
    """A connection that reports its opening and closing to its server's guard."""

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.guard.opened(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.closed(self)
        super().connection_lost(exc)


def guarded_factory(guard: ConnectionGuard, factory: Any) -> Any:
    """A server's request factory that first tells the guard a request's head is complete:
    aiohttp calls it once the line and headers are parsed, before any handler runs."""

    def make(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> Any:
        guard.head_complete(protocol)
        return factory(message, payload, protocol, writer, task)

    return make


def authenticated(request: web.BaseRequest) -> None:
    """The request's connection showed a token (or needs none): it leaves the bound."""
    conn = request.protocol
    if isinstance(conn, GuardedHandler):
        conn.guard.authenticated(conn)


async def close_unauthenticated(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: an answer on a connection that showed no token ends it."""
    conn = request.protocol
    if isinstance(conn, GuardedHandler) and not conn.guard.is_authenticated(conn):
        response.force_close()
        # Said too: aiohttp 3.14 writes the Connection header before this hook runs.
        response.headers["Connection"] = "close"
