"""A NATS client logged in as one of Heddle's users, with the errors the server sends it
collected, for tests that watch the server refuse something (a permission violation)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import nats
from heddle.shared.broker import nats_permissions as perms
from nats.aio.client import Client


@dataclass
class LoggedIn:
    nc: Client
    errors: list[str] = field(default_factory=list)  # the server's asynchronous errors

    async def refused(self, what: str = "permissions violation", timeout: float = 5.0) -> None:
        """Until the server has said ``what`` (``permissions violation for subscription``
        for a subscription), failing after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not any(what in e for e in self.errors):
            assert time.monotonic() < deadline, self.errors
            await asyncio.sleep(0.02)


async def login(url: str, user: str, password: str, **options: object) -> LoggedIn:
    """Connect as ``user`` with its own inboxes, no reconnect: an error is the test's."""
    logged = LoggedIn(nc=None)  # type: ignore[arg-type]

    async def error_cb(exc: Exception) -> None:
        logged.errors.append(str(exc))

    logged.nc = await nats.connect(
        url,
        user=user,
        password=password,
        inbox_prefix=perms.inbox_prefix(user),
        error_cb=error_cb,
        allow_reconnect=False,
        **options,  # type: ignore[arg-type]
    )
    return logged
