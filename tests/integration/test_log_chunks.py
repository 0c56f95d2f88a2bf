"""Step logs in chunks (docs/logs.md): the lines of one pipe read are one message, and every
reader still sees lines: cursors inside a chunk, exact counts with the orchestrator's notes
anywhere, tails that read about N lines, ``after`` and ``Last-Event-ID`` mid-chunk.

The publisher and the reader against a real nats-server (the same connection publishes the
runner's messages and the notes, so their order in the stream is known); the HTTP API through
a whole stack. The chunking itself, without I/O: tests/unit/runner_agent/test_log_chunks.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from heddle.services.gateway.reads import log_tail
from heddle.services.gateway.reads.log_index import AttemptLogs, attempt_messages
from heddle.services.gateway.reads.log_lines import CURSOR_SPAN
from heddle.services.gateway.reads.log_reader import read_lines
from heddle.services.gateway.reads.log_tail import read_attempt
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.services.runner_agent.output import MSG_HEADER, LogPublisher
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import MAX_CHUNK_LINES, LogLine, encode
from nats.aio.client import Client
from nats.js import JetStreamContext

from tests.support.logs import all_lines, sse
from tests.support.stack import StackFactory

# ---- publisher and reader against a real nats-server --------------------------------------


RUNNER = "r"  # the runner each attempt here is recorded as given to
RUNNERS = dict.fromkeys(range(10), RUNNER)


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_server.url)
    await ensure_resources(nc, Settings.from_env({}, nats_url=nats_server.url))
    yield nc
    await nc.close()


@pytest.fixture
async def acked(nc: Client) -> AckedPublisher:
    return await AckedPublisher(nc).start()


@pytest.fixture
def js(nc: Client) -> JetStreamContext:
    return nc.jetstream(timeout=10)


class Attempt:
    """One attempt's log written the way the services write it, and what it should read."""

    def __init__(
        self, nc: Client, acked: AckedPublisher, attempt: int, max_line_bytes: int = 16384
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=10)
        self.attempt = attempt
        self.subject = names.log_attempt_filter("run", "step", attempt)  # both writers
        self.notes = names.log("run", "step", attempt, "default", names.NOTES_WRITER)
        self.pub = LogPublisher(nc, acked, "run", "step", attempt, max_line_bytes, RUNNER)
        self.expected: list[tuple[str, int, str]] = []  # (stream, seq, text)

    async def orchestrator(self, text: str) -> None:
        """A note as the orchestrator writes it (same connection: its place is known), its
        storing awaited: a flush does not wait for it, and the count below raced the last two."""
        await self.js.publish(self.notes, encode(LogLine(stream="heddle", seq=0, text=text)))
        self.expected.append(("heddle", 0, text))

    async def note(self, text: str) -> None:
        await self.pub.note(text)
        self.expected.append(("heddle", self.pub.seq, text))

    async def lines(self, stream: str, texts: list[str], reads: int = 1) -> None:
        """Complete lines, written as ``reads`` pipe reads."""
        data = "".join(t + "\n" for t in texts).encode()
        step = -(-len(data) // reads)
        first = self.pub.seq + 1
        for i in range(0, len(data), step):
            await self.pub.write(stream, data[i : i + step])
        self.expected += [(stream, first + i, t) for i, t in enumerate(texts)]

    async def close(self, text: str) -> None:
        await self.pub.close(text)
        self.expected.append(("heddle", self.pub.seq, text))

    async def check(self, tails: list[int]) -> AttemptLogs:
        """Everything reads back as written: all of it, from any cursor, and every tail;
        returns the number of messages the lines took."""
        await self.nc.flush()
        found = await attempt_messages(self.js, "run", "step", RUNNERS)
        messages = found[self.attempt]
        whole = await read_attempt(self.js, "run", "step", self.attempt, messages, 10**6, RUNNERS)
        got = [(x.stream, x.seq, x.text) for x in whole.lines]
        assert got == self.expected
        assert whole.count == len(self.expected)
        cursors = [x.cursor for x in whole.lines]
        assert cursors == sorted(set(cursors)) and whole.last == cursors[-1]
        for tail in tails:
            part = await read_attempt(self.js, "run", "step", self.attempt, messages, tail, RUNNERS)
            assert part.count == len(self.expected), tail
            assert part.lines == (whole.lines[-tail:] if tail else []), tail
        # From any cursor: the lines after it, in the middle of a chunk or not.
        some = {0, 1, 2, len(cursors) // 2, len(cursors) - 2} | set(range(0, len(cursors), 997))
        for i in sorted(some):
            if 0 <= i < len(cursors):
                after = await read_lines(self.js, self.subject, cursors[i], whole.last)
                assert after == whole.lines[i + 1 :], i
        return messages


async def test_chunks_read_back_with_notes_anywhere(
    nc: Client, acked: AckedPublisher, js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = Attempt(nc, acked, 1)
    await a.orchestrator("cancel requested early")  # before the runner's first message
    await a.note("started on runner r (pid 1)")
    for i in range(12):
        await a.lines("stdout", [f"{i}-{j}" for j in range(1700)], reads=2)
        if i in (3, 7):
            await a.orchestrator(f"a note among the chunks ({i})")
        await a.lines("stderr", [f"err {i}"])
    await a.close("failed: exit code 1")
    await a.orchestrator("retrying in 200 ms (attempt 2 of 2)")
    await a.orchestrator("another note after the runner's last line")
    total = len(a.expected)
    # 7,000 and 15,000 lines hold one and two of the notes among the chunks.
    tails = [0, 1, 2, 3, 4, 5, 999, 1000, 1001, 1699, 1700, 1701, 5000, 7000, 15000]
    messages = await a.check([*tails, total - 1, total, total + 1])
    assert messages.messages < total / 100  # chunks, not a message per line
    # A tail reads about its own lines (and the rest of one chunk), not the attempt.
    read: list[int] = []
    replay = log_tail.replay

    async def counted(*args: Any) -> AsyncIterator[list[Any]]:
        read.append(0)
        async for batch in replay(*args):
            read[-1] += len(batch)
            yield batch

    monkeypatch.setattr(log_tail, "replay", counted)
    for tail in (1, 5, 1000, 1001, 3000):
        part = await read_attempt(js, "run", "step", 1, messages, tail, RUNNERS)
        assert len(part.lines) == tail and read[-1] <= tail + MAX_CHUNK_LINES + 4, (tail, read)
    # The runner numbers its messages: a header on each.
    first = await js.get_msg(names.LOGS_STREAM, seq=1, subject=a.subject, next=True)
    assert first.headers is None  # the orchestrator's
    started = await js.get_msg(names.LOGS_STREAM, seq=first.seq + 1, subject=a.subject, next=True)
    assert started.headers == {MSG_HEADER: "1"}
    last = await js.get_last_msg(names.LOGS_STREAM, a.subject)
    assert json.loads(last.data) == {
        "stream": "heddle",
        "seq": 0,
        "text": "another note after the runner's last line",
    }


async def test_single_lines_and_notes_only(nc: Client, acked: AckedPublisher) -> None:
    # A line per read (a command that prints slowly): a message per line, as before.
    slow = Attempt(nc, acked, 1)
    await slow.note("started")
    for i in range(20):
        await slow.lines("stdout", [f"line {i}"])
        if i % 7 == 3:
            await slow.orchestrator(f"note {i}")
    await slow.close("succeeded")
    await slow.check(list(range(0, 30)))
    # Many notes before the runner's few lines; and notes alone (a skipped step).
    early = Attempt(nc, acked, 2)
    for i in range(12):
        await early.orchestrator(f"note {i}")
    await early.note("started")
    await early.lines("stdout", ["a", "b", "c"])
    await early.close("succeeded")
    await early.check(list(range(0, 20)))
    only = Attempt(nc, acked, 3)
    for i in range(10):
        await only.orchestrator(f"note {i}")
    await only.check([0, 1, 5, 9, 10, 11])


async def stored(js: JetStreamContext) -> None:
    """Until everything published so far on this connection is stored: the stream stores a
    connection's messages in order, so an acknowledged one comes after them."""
    await js.publish(
        names.log("run", "other", 1, "default", RUNNER), encode(LogLine(stream="heddle", seq=0))
    )


async def test_a_held_first_note_leads_the_output_or_joins_the_final_note(
    nc: Client,
    acked: AckedPublisher,
    js: JetStreamContext,
) -> None:
    held = "started on runner r (pid 1)"
    # Nothing written: the first and the final note are one message of two lines.
    quiet = Attempt(nc, acked, 1)
    quiet.pub.hold(held)
    await quiet.close("succeeded")  # unconfirmed (no output): stored once what follows is
    await stored(js)
    quiet.expected.insert(0, ("heddle", 1, held))
    assert (await quiet.check([0, 1, 2, 3])).messages == 1
    only = await js.get_last_msg(names.LOGS_STREAM, quiet.subject)
    assert json.loads(only.data) == {"stream": "heddle", "seq": 1, "lines": [held, "succeeded"]}
    assert only.headers == {MSG_HEADER: "1"}
    # Output first: the held note goes out before it.
    loud = Attempt(nc, acked, 2)
    loud.pub.hold(held)
    await loud.pub.write("stdout", b"a\nb\n")
    await loud.close("succeeded")
    loud.expected[:0] = [("heddle", 1, held), ("stdout", 2, "a"), ("stdout", 3, "b")]
    assert (await loud.check([0, 1, 4])).messages == 3
    # Released (the command outlived the report delay): sent once, then the rest as usual.
    slow = Attempt(nc, acked, 3)
    slow.pub.hold(held)
    await slow.pub.release()
    await slow.pub.release()
    await slow.note("a note")
    await slow.close("succeeded")
    await stored(js)
    slow.expected.insert(0, ("heddle", 1, held))
    assert (await slow.check([0, 3])).messages == 3


async def test_long_lines_and_partial_lines(
    nc: Client, acked: AckedPublisher, js: JetStreamContext
) -> None:
    a = Attempt(nc, acked, 1, max_line_bytes=16)
    await a.note("started")
    await a.pub.write("stdout", b"one\ntw")  # a partial line waits for its newline
    await a.pub.write("stdout", b"o\n" + b"x" * 40 + b"\n\xff\xfe\n")
    a.expected += [("stdout", 2 + i, t) for i, t in enumerate(["one", "two"])]
    a.expected += [("stdout", 4 + i, t) for i, t in enumerate(["x" * 16, "x" * 16, "x" * 8])]
    a.expected.append(("stdout", 7, "\ufffd\ufffd"))
    await a.pub.write("stderr", "no newline: é".encode())  # goes out before the final note
    a.expected.append(("stderr", 8, "no newline: é"))
    await a.close("succeeded")
    await nc.flush()
    lines = await read_lines(js, a.subject, 0, 10**12)
    assert [(x.stream, x.seq, x.text) for x in lines] == a.expected
    assert a.pub.output_lines == 7


# ---- over HTTP -------------------------------------------------------------------------------


async def test_http_cursors_tails_and_counts_over_chunks(stack: StackFactory) -> None:
    s = await stack(runners=2)
    doc = {
        "steps": [
            {"id": "seq", "command": "seq 1 30000"},
            {"id": "flaky", "command": "seq 1 20000; echo oops >&2; exit 1", "retries": 1},
        ]
    }
    run_id = await s.submit(doc)
    run = await s.wait_run(run_id, timeout=60)
    assert run["status"] == "failed"
    lines = await all_lines(s, run_id, "seq")
    assert [x["text"] for x in lines if x["stream"] == "stdout"] == [
        str(i) for i in range(1, 30001)
    ]
    assert [x["seq"] for x in lines] == list(range(1, 30003))
    cursors = [x["cursor"] for x in lines]
    assert cursors == sorted(set(cursors))
    # Chunks: lines share a message (the same cursor // CURSOR_SPAN).
    same = [i for i in range(1, len(lines) - 1) if cursors[i] // 4096 == cursors[i + 1] // 4096]
    inside = same[len(same) // 2]
    assert cursors[inside] % CURSOR_SPAN < cursors[inside + 1] % CURSOR_SPAN
    # ?after= in the middle of a chunk resumes at the next line.
    assert await all_lines(s, run_id, "seq", cursors[inside]) == lines[inside + 1 :]
    # SSE from the middle of a chunk: ?after= and Last-Event-ID.
    session = await s.http()
    url = f"{s.base}/api/runs/{run_id}/steps/seq/logs?follow=1"
    resume = [(f"&after={cursors[inside]}", {}), ("", {"Last-Event-ID": str(cursors[inside])})]
    for extra, headers in resume:
        async with session.get(url + extra, headers=headers) as resp:
            events = [e async for e in sse(resp)]
        got = [e for e in events if e["event"] == "message"]
        assert [int(e["id"]) for e in got] == cursors[inside + 1 :]
        assert [e["data"] for e in got] == lines[inside + 1 :]
        assert events[-1]["event"] == "end" and events[-1]["data"]["cursor"] == cursors[-1]
    # The step document: exact counts, tails across chunk boundaries.
    for tail in (0, 1, 2, 999, 1000, 1001, 2500, 30001, 30002, 30003):
        status, body = await s.request("GET", f"/api/runs/{run_id}/steps/seq?tail={tail}")
        assert status == 200
        (group,) = body["logs"]
        assert group["lineCount"] == 30002 and group["truncated"] == (tail < 30002)
        assert group["lines"] == (lines[-tail:] if tail else [])
        assert body["logsCursor"] == cursors[-1]
    # Two attempts, each ending with notes of the orchestrator's after the runner's last.
    every = await all_lines(s, run_id, "flaky")
    for tail in (1, 2, 3, 1000, 1001):
        status, body = await s.request("GET", f"/api/runs/{run_id}/steps/flaky?tail={tail}")
        assert [g["attempt"] for g in body["logs"]] == [1, 2]
        for group in body["logs"]:
            mine = [x for x in every if x["attempt"] == group["attempt"]]
            assert group["lineCount"] == len(mine) == 20004  # 20,000 + oops + 3 notes
            assert group["lines"] == mine[-tail:]
    notes = [x["text"] for x in every if x["attempt"] == 1 and x["stream"] == "heddle"]
    assert notes[-1].startswith("retrying") and notes[-2] == "failed: exit code 1"
