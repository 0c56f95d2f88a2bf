"""A nats-server with every Heddle user, configured as shared/broker/nats_permissions.py says,
for the tests that watch it refuse a user something: one per test module."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from heddle.services.local.embedded_nats import EmbeddedNats, free_port

from tests.support.nats_clients import LoggedIn, login
from tests.support.stack import SUPERUSER, SUPERUSER_PASSWORD, auth_with_superuser


@dataclass
class Server:
    url: str
    passwords: dict[str, str]

    async def login(self, user: str) -> LoggedIn:
        return await login(self.url, user, self.passwords[user])


@contextmanager
def permission_server(
    tmp: Path,
    runners: list[str],
    prepare: Callable[[str], Awaitable[None]],
    namespace_inspectors: tuple[str, ...] = (),
) -> Iterator[Server]:
    """The server, its users (``runners``' and ``namespace_inspectors``' among them), made
    ready by ``prepare`` (given its URL; the superuser may do anything), until the end."""
    auth = auth_with_superuser(tmp, runners)
    if namespace_inspectors:
        auth.users.keep_namespace_inspectors(list(namespace_inspectors))
        auth.users.save()
    config = auth.users.config_path
    server = EmbeddedNats(tmp / "nats", free_port(), log_file=tmp / "nats.log", config=config)
    server.start()
    passwords = {**auth.users.passwords, SUPERUSER: SUPERUSER_PASSWORD}
    loop = asyncio.new_event_loop()  # its own: no test's loop runs yet
    try:
        loop.run_until_complete(prepare(server.url))
        yield Server(server.url, passwords)
    finally:
        loop.close()
        server.stop()
