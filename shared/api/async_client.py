"""The asyncio client, on aiohttp: the sync client's methods (methods.py, the same calls),
awaited, and its streams as async iterators. One aiohttp session per client, closed by
``close`` or at the end of ``async with``.

    async with AsyncClient() as client:
        run = await client.wait((await client.submit("flow.yaml")).run_id, timeout=600)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from types import TracebackType
from typing import Any, TypeVar

import aiohttp
import heddle.shared.api.calls as calls
import heddle.shared.api.request as request
from heddle.shared.api.answers import RunDocument, RunEnd
from heddle.shared.api.errors import ClientError, Refused, Unreachable
from heddle.shared.api.events import EventLines, LogEvent, RunEvent, Tracked
from heddle.shared.api.methods import Api, AsyncSender
from heddle.shared.api.request import EVENTS, JSON, Call, Stream
from heddle.shared.api.waiting import Patience, is_over

T = TypeVar("T")
E = TypeVar("E")
OnChange = Callable[[RunDocument], None]
# What aiohttp raises when there is no answer, or the connection breaks in one.
NO_ANSWER = (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError)


class AsyncClient(Api, AsyncSender):
    """The gateway's HTTP API for asyncio; configured as Client is (methods.Api)."""

    _session: aiohttp.ClientSession | None = None  # made at the first call

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, call: Call[T]) -> T:
        """Make ``call``: its 2xx answer as its type, else Refused or Unreachable."""
        async with self._open(call.method, call.path, call.body, JSON) as resp:
            raw = await resp.read()
        return request.answer_of(call, self.url, raw)

    async def stream(self, stream: Stream[E]) -> AsyncGenerator[E, None]:
        """The events of ``stream`` until the gateway ends it."""
        parser = EventLines()
        async with self._open("GET", stream.path, None, EVENTS, stream=True) as resp:
            rest = b""
            async for chunk in resp.content.iter_any():  # lines of any length
                *lines, rest = (rest + chunk).split(b"\n")
                for raw in lines:
                    event = parser.feed(raw.decode("utf-8", errors="replace"))
                    found = None if event is None else request.event_of(stream, self.url, event)
                    if found is not None:
                        yield found

    def events(self, run_id: str, steps: str | None = None) -> AsyncGenerator[RunEvent, None]:
        """The run's state, then each change, then its end, as Client.events."""
        return self.stream(calls.run_events(run_id, steps))

    def follow(
        self, run_id: str, step_id: str, after: int | None = None
    ) -> AsyncGenerator[LogEvent, None]:
        """A step's lines as they are written, then its end, as Client.follow."""
        return self.stream(calls.follow(run_id, step_id, after))

    async def wait(
        self, run_id: str, timeout: float | None = None, on_change: OnChange | None = None
    ) -> RunDocument:
        """The run once it is over, as Client.wait."""
        patience = Patience(run_id, timeout, asyncio.get_running_loop().time())
        run = await self._read_run(run_id, patience, on_change, until_seen=True)
        if not is_over(run):
            with contextlib.suppress(Refused, Unreachable, TimeoutError):
                left = patience.left(asyncio.get_running_loop().time())
                async with asyncio.timeout(left):
                    run = await self._told(run_id, run, patience, on_change)
        if not is_over(run):
            run = await self._read_run(run_id, patience, on_change)
        return run

    async def _told(
        self, run_id: str, run: RunDocument, patience: Patience, on_change: OnChange | None
    ) -> RunDocument:
        tracked = Tracked(run)
        async with contextlib.aclosing(self.events(run_id)) as events:  # closed as it returns
            async for event in events:
                if isinstance(event, RunEnd):
                    return await self._read_run(run_id, patience, on_change, until_seen=True)
                if tracked.apply(event) and on_change is not None:
                    on_change(tracked.run)
        return tracked.run

    async def _read_run(
        self, run_id: str, patience: Patience, on_change: OnChange | None, until_seen: bool = False
    ) -> RunDocument:
        loop = asyncio.get_running_loop()
        while True:
            try:
                run = await self.run(run_id)
            except ClientError as exc:
                patience.bear(exc, loop.time())
            else:
                patience.answered(run, loop.time())
                if on_change is not None:
                    on_change(run)
                if until_seen or is_over(run):
                    return run
            await asyncio.sleep(patience.pause(self.poll_interval, loop.time()))

    @contextlib.asynccontextmanager
    async def _open(
        self, method: str, path: str, body: Any, accept: str, stream: bool = False
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        wire = request.prepare(self.connection, method, path, body, accept)
        if self._session is None:
            self._session = aiohttp.ClientSession()
        # A stream waits as long as it is open; each read of it, the timeout.
        timeout = aiohttp.ClientTimeout(
            total=None if stream else self.connection.timeout, sock_read=self.connection.timeout
        )
        try:
            async with self._session.request(
                wire.method, wire.url, data=wire.data, headers=wire.headers, timeout=timeout
            ) as resp:
                if resp.status >= 400:
                    raise request.refusal(resp.status, await resp.read())
                yield resp
        except NO_ANSWER as exc:
            raise Unreachable(self.url, exc) from None
