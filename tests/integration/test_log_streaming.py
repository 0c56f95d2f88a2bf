"""The step document is written as its lines are read (chunked, never built whole), and is
the same document a client would build from the step and its whole log; a NATS that does
not answer gives a 503 before the answer begins and an incomplete body after."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Iterator
from typing import Any

import aiohttp

from tests.support.logs import all_lines
from tests.support.stack import Stack, StackFactory, freeze, step_of


def expected_doc(
    run: dict[str, Any], step: str, lines: list[dict[str, Any]], tail: int
) -> dict[str, Any]:
    """The step document as the step in the run document and its whole log make it."""
    groups = []
    for attempt in sorted({x["attempt"] for x in lines}):
        mine = [x for x in lines if x["attempt"] == attempt]
        groups.append(
            {
                "attempt": attempt,
                "lineCount": len(mine),
                "truncated": len(mine) > tail,
                "lines": mine[-tail:] if tail else [],
            }
        )
    return {
        "runId": run["runId"],
        **step_of(run, step),
        "logs": groups,
        "logsCursor": lines[-1]["cursor"],
        "logsExpired": False,
    }


async def test_the_step_document_is_streamed_and_whole(stack: StackFactory) -> None:
    s = await stack(runners=2)
    doc = {"steps": [{"id": "big", "command": "seq 1 60000; echo oops >&2; exit 1", "retries": 1}]}
    run_id = await s.submit(doc)
    run = await s.wait_run(run_id, timeout=60)
    assert run["status"] == "failed"
    lines = await all_lines(s, run_id, "big")
    assert len(lines) == 2 * 60004  # per attempt: started, 60,000 lines, oops, two notes
    session = await s.http()
    for tail in (1_000_000, 60004, 60003, 45000, 1000, 1, 0):
        url = f"{s.base}/api/runs/{run_id}/steps/big?tail={tail}"
        async with session.get(url) as resp:
            assert resp.status == 200 and resp.content_type == "application/json"
            assert resp.headers.get("Transfer-Encoding") == "chunked", tail
            assert "Content-Length" not in resp.headers, tail
            body = json.loads(await resp.read())
        assert body == expected_doc(run, "big", lines, tail), tail


@contextlib.contextmanager
def frozen(s: Stack) -> Iterator[None]:
    """nats-server stopped (SIGSTOP): connected, reading nothing, answering nothing."""
    assert s.nats is not None and s.nats.proc is not None
    freeze(s.nats.proc.pid)
    try:
        yield
    finally:
        s.nats.proc.send_signal(signal.SIGCONT)


async def test_a_nats_timeout_is_a_503_before_the_lines_and_a_cut_after(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    # Two attempts, the first one larger than every buffer between NATS and the client.
    doc = {"steps": [{"id": "big", "command": "seq 1 300000; exit 1", "retries": 1}]}
    run_id = await s.submit(doc)
    assert (await s.wait_run(run_id, timeout=60))["status"] == "failed"
    session = await s.http()
    step = f"{s.base}/api/runs/{run_id}/steps/big"
    async with session.get(f"{step}?tail=1000000") as cut:
        assert cut.status == 200
        await cut.content.readany()  # the answer has begun
        # One freeze for both cases, their NATS timeouts running side by side: the answer
        # under way is cut, and every read of the step asked for now, before its answer
        # began, needs NATS first.
        with frozen(s):
            rest, *answers = await asyncio.gather(
                cut.read(),
                *(session.get(f"{step}{path}") for path in ("", "?tail=10", "/logs")),
                return_exceptions=True,
            )
    assert isinstance(rest, aiohttp.ClientPayloadError), rest
    for resp in answers:
        assert isinstance(resp, aiohttp.ClientResponse), resp
        async with resp:
            assert resp.status == 503 and resp.headers["Retry-After"] == "1"
            assert set(await resp.json()) == {"error"}
    # And with NATS back, the step reads again.
    async with session.get(f"{step}?tail=1") as resp:
        assert resp.status == 200
        body = await resp.json()
    assert [len(g["lines"]) for g in body["logs"]] == [1, 1]
    assert body["logs"][1]["lines"][0]["text"].startswith("failed: exit code 1")
