"""No token ever reaches a log: requests aiohttp itself cannot parse, and log it with their
raw bytes, sent with a real token to a real gateway process; then its whole output is
searched for the token. What the lines say is not asserted, only what they must not hold."""

from __future__ import annotations

import asyncio

from tests.support.stack import Stack, StackFactory

LIMIT = 8190  # aiohttp's longest request line or header field


async def exchange(s: Stack, request: bytes) -> bytes:
    """Send ``request`` as bytes on a socket of its own; the gateway's whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", s.gateway_port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def make_token(s: Stack, name: str) -> str:
    status, body = await s.request("POST", "/api/tokens", json={"name": name, "role": "viewer"})
    assert status == 201, body
    return body["token"]


async def test_a_token_in_a_request_aiohttp_cannot_parse_never_reaches_the_log(
    stack: StackFactory,
) -> None:
    s = await stack(runners=0)
    host = f"Host: 127.0.0.1:{s.gateway_port}\r\n".encode()
    tokens = [s.admin_token, await make_token(s, "second"), await make_token(s, "third")]
    first, second, third = (t.encode() for t in tokens)
    too_long = b"X-Pad: " + b"p" * (LIMIT + 100) + b"\r\n"
    requests = [
        # A real token's header, then an over-long header line.
        b"GET /api/runs HTTP/1.1\r\n" + host + b"Authorization: Bearer " + first + b"\r\n"
        b"Content-Length: 0\r\n" + too_long + b"\r\n",
        # The over-long line is the Authorization header itself.
        b"GET /api/runs HTTP/1.1\r\n"
        + host
        + b"Authorization: Bearer "
        + second
        + b"x" * (LIMIT + 100)
        + b"\r\n\r\n",
        # A token in the query of a URL with a NUL byte in it.
        b"GET /?token=" + third + b"\x00 HTTP/1.1\r\n" + host + b"\r\n",
        b"GET /api/runs?x=1&token=" + first + b"\x00 HTTP/1.1\r\n" + host + b"\r\n",
    ]
    before = len(s.logs("gateway"))
    for request in requests:
        answer = await exchange(s, request)
        assert answer.split(b" ", 2)[1].startswith(b"4"), answer[:200]
        assert not any(token.encode() in answer for token in tokens)  # nor in the answer
    assert (await s.request("GET", "/api/runs"))[0] == 200
    # aiohttp logged each error before it answered: the search below is not of an empty log.
    log = s.logs("gateway")
    assert len(log) > before
    for i, token in enumerate(tokens):
        assert token not in log, f"token {i} is in the gateway's log"
        assert token[4:24] not in log, f"part of token {i} is in the gateway's log"
