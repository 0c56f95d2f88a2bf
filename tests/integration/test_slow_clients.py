"""Slow and unauthenticated connections against a real gateway process: a request head that
never ends is closed after HEDDLE_HEADER_TIMEOUT, past HEDDLE_MAX_UNAUTHENTICATED the oldest
connection without a token is closed, an answer without a token ends its connection, and
the gateway keeps answering everyone else meanwhile. Each wait below is a generous bound on
something the gateway must do, never a measure of how fast."""

from __future__ import annotations

import asyncio
import contextlib

from tests.support.stack import Stack, StackFactory

BOUND = 30.0  # seconds: far above any timeout set here; reaching it fails the test


class Conn:
    """One raw connection to the gateway."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, s: Stack) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", s.gateway_port))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def closed_by_server(self) -> bytes:
        """Everything the server sends until it closes the connection (a reset, if it
        closed while bytes were still coming, is a close too)."""
        try:
            return await asyncio.wait_for(self.reader.read(), BOUND)
        except ConnectionResetError:
            return b""

    async def answer(self) -> tuple[int, bytes]:
        """One answer (status, head) on a connection that may stay open."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), BOUND)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await self.reader.readexactly(length)
        return int(head.split(b" ", 2)[1]), head

    def close(self) -> None:
        self.writer.close()


def head(s: Stack, path: str = "/api/runs", token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{s.gateway_port}\r\n{auth}".encode()


async def half_open(s: Stack, count: int) -> list[Conn]:
    """``count`` connections that each sent a request line and a header, and no more."""
    conns = [await Conn.open(s) for _ in range(count)]
    for conn in conns:
        await conn.send(head(s) + b"X-Never-Ending: a")
    return conns


async def test_half_finished_requests_are_closed_while_the_gateway_answers_others(
    stack: StackFactory,
) -> None:
    s = await stack(runners=0, HEDDLE_HEADER_TIMEOUT="1")
    stalled = await half_open(s, 20)
    silent = await Conn.open(s)  # connects, sends nothing at all

    async def dribble(conn: Conn) -> None:  # a byte at a time, never a whole head
        with contextlib.suppress(ConnectionError):
            for byte in head(s) * 10:
                await conn.send(bytes([byte]))
                await asyncio.sleep(0.1)

    slow = await Conn.open(s)
    dribbling = asyncio.create_task(dribble(slow))
    try:
        # Answered while they are open, by a connection of its own with a token.
        assert (await s.request("GET", "/api/runs"))[0] == 200
        for conn in [*stalled, silent, slow]:
            assert await conn.closed_by_server() == b""  # closed, and no answer
    finally:
        dribbling.cancel()
        for conn in [*stalled, silent, slow]:
            conn.close()
    assert (await s.request("GET", "/api/runs"))[0] == 200


async def test_past_the_bound_the_oldest_connection_without_a_token_is_closed(
    stack: StackFactory,
) -> None:
    s = await stack(runners=0, HEDDLE_MAX_UNAUTHENTICATED="5", HEDDLE_HEADER_TIMEOUT="120")
    opened: list[Conn] = []
    try:
        # A connection that showed a token is outside the bound, and stays open for more.
        trusted = await Conn.open(s)
        opened.append(trusted)
        await trusted.send(head(s, token=s.admin_token) + b"\r\n")
        assert (await trusted.answer())[0] == 200
        stalled = await half_open(s, 5)
        opened += stalled
        newest = (await half_open(s, 1))[0]
        opened.append(newest)
        assert await stalled[0].closed_by_server() == b""  # the oldest, at once
        # The others are still open: each gets its answer once its head is complete.
        for conn in [*stalled[1:], newest]:
            await conn.send(b"\r\n\r\n")
            assert (await conn.answer())[0] == 401
        # A new client gets in though the bound is full again, and so does the trusted one.
        opened += await half_open(s, 5)
        client = await Conn.open(s)
        opened.append(client)
        await client.send(head(s, token=s.admin_token) + b"\r\n")
        assert (await client.answer())[0] == 200
        await trusted.send(head(s, token=s.admin_token) + b"\r\n")
        assert (await trusted.answer())[0] == 200
    finally:
        for conn in opened:
            conn.close()


async def test_an_answer_without_a_token_ends_its_connection(stack: StackFactory) -> None:
    s = await stack(runners=0)
    for path, token, status in (("/healthz", None, 200), ("/api/runs", None, 401)):
        conn = await Conn.open(s)
        try:
            await conn.send(head(s, path, token) + b"\r\n")
            answer = await conn.closed_by_server()
            assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:100]
            assert b"\r\nConnection: close\r\n" in answer
        finally:
            conn.close()
    # With a token the connection is kept for the next request.
    conn = await Conn.open(s)
    try:
        for path in ("/api/runs", "/healthz", "/api/runners"):
            await conn.send(head(s, path, s.admin_token) + b"\r\n")
            status, answer = await conn.answer()
            assert status == 200 and b"Connection: close" not in answer
    finally:
        conn.close()
