"""aiohttp's own error answers, in the API's error shape.

A request aiohttp cannot parse (an unknown method such as ``FOO``, a malformed request line
or header) never reaches the app or its middleware: aiohttp's connection handler answers it
in plain text, in ``RequestHandler.handle_error``, and has no setting for that answer. So
the gateway serves its app through ``GatewayRunner``, whose connections use a handler that
overrides that one method and answers with ``answers.error``.

The same handler watches slow and unauthenticated connections (slow_clients.py), through
the server's request factory and the connection's ``connection_made`` and
``connection_lost``.

This leans on two aiohttp internals, ``AppRunner._make_server`` and ``Server._kwargs``;
tests/integration/test_bad_inputs.py and tests/integration/test_slow_clients.py send such requests,
so an upgrade that moves them fails there.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadStatusLine
from heddle.services.gateway.http.answers import error
from heddle.services.gateway.http.keys import SETTINGS
from heddle.services.gateway.http.slow_clients import (
    ConnectionGuard,
    GuardedHandler,
    guarded_factory,
)
from heddle.shared.core.redact import redact


def describe(status: int, exc: BaseException | None, message: str | None) -> str:
    """The ``error`` of aiohttp's own answer: its message's first line, for a client."""
    if status == 500:
        return "internal error"
    lines = (message or HTTPStatus(status).phrase).strip().splitlines()
    first = lines[0].rstrip(":") if lines else HTTPStatus(status).phrase
    # The first line may quote the request: a token in it goes back to no one, not even its
    # sender (a proxy's log might keep the answer).
    first = redact(first)
    if isinstance(exc, BadStatusLine):  # an unknown method is one
        return f"bad request line: {first} (the API's methods are GET, HEAD, POST and PATCH)"
    return f"bad request: {first}" if status == 400 else first


class JsonErrorHandler(GuardedHandler):
    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # aiohttp's own logs the error, and raises if part of an answer was sent already.
        super().handle_error(request, status, exc, message)
        response = error(status, describe(status, exc, message))
        response.force_close()  # after a request that could not be parsed, trust no more
        return response


class JsonErrorServer(web.Server):
    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def __call__(self) -> web.RequestHandler:
        loop = asyncio.get_running_loop()
        return JsonErrorHandler(self, loop=loop, guard=self.guard, **self._kwargs)


class GatewayRunner(web.AppRunner):
    """An AppRunner whose connections answer unparsable requests with JSON errors, and are
    closed when slow or past the bound of unauthenticated ones."""

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()
        settings = self.app[SETTINGS]
        guard = ConnectionGuard(settings.header_timeout, settings.max_unauthenticated)
        return JsonErrorServer(
            made.request_handler,
            guard=guard,
            request_factory=guarded_factory(guard, made.request_factory),
            handler_cancellation=made.handler_cancellation,
            **made._kwargs,
        )
