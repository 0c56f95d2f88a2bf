"""Step logs through the real services: written as the command writes them, read back grouped
by attempt, followed live over SSE, and kept when a runner dies mid-step (docs/logs.md). The
step document is written as its lines are read (chunked, never built whole) and is the same
document a client would build from the step and its whole log; a NATS that does not answer
gives a 503 before the answer begins and an incomplete body after. test_log_chunks.py has the
chunks themselves: cursors inside them, counts, tails."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from heddle.shared.wire import names
from heddle.shared.wire.contracts import MAX_CHUNK_LINES
from heddle.shared.wire.timefmt import parse

from tests.support.logs import all_lines, sse, step_doc, texts
from tests.support.stack import Stack, StackFactory, freeze, step_of

FIVE = "for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done"


async def test_follower_sees_lines_live_then_the_end(stack: StackFactory) -> None:
    s = await stack(runners=1)
    release = s.tmp / "release"  # the only runner is busy until the follower is connected
    hold = f"while [ ! -e {release} ]; do sleep 0.05; done"
    await s.submit({"runId": "hold", "steps": [{"id": "h", "command": hold}]})
    await s.wait_step("hold", "h", {"running"})
    run_id = await s.submit({"runId": "five", "steps": [{"id": "five", "command": FIVE}]})
    session = await s.http()
    url = f"{s.base}/api/runs/{run_id}/steps/five/logs?follow=1"
    events, status = [], None
    async with session.get(url) as resp:
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        async for ev in sse(resp):
            events.append(ev)
            release.touch()
            if ev["event"] == "message" and ev["data"]["stream"] == "stdout" and not status:
                status = (await s.run(run_id))["steps"][0]["status"]
    # The follower connected while the only runner was busy: the step was still queued.
    assert events[0] == {"event": "status", "data": {"status": "queued", "attempt": 1}}
    # The first line came before the step ended (its started event may still be on its way).
    assert status in ("queued", "running")
    lines = [e for e in events if e["event"] == "message"]
    assert texts([e["data"] for e in lines], "stdout") == [f"line{i}" for i in range(1, 6)]
    cursors = [int(e["id"]) for e in lines]
    assert cursors == sorted(cursors) and cursors == [e["data"]["cursor"] for e in lines]
    notes = texts([e["data"] for e in lines], "heddle")
    assert notes[0].startswith("started on runner runner-0 (pid ") and notes[0].endswith(")")
    assert notes[1] == "succeeded" and len(notes) == 2
    end = events[-1]
    assert end["event"] == "end"
    assert (end["data"]["status"], end["data"]["exitCode"]) == ("succeeded", 0)
    assert end["data"]["cursor"] == cursors[-1]
    # Following a finished step from a cursor replays what follows it, then ends at once.
    async with session.get(url + f"&after={cursors[3]}") as resp:
        again = [e async for e in sse(resp)]
    assert [e.get("id") for e in again if e["event"] == "message"] == [str(c) for c in cursors[4:]]
    assert again[-1]["event"] == "end"
    # The same with the header an EventSource sends when it reconnects.
    async with session.get(url, headers={"Last-Event-ID": str(cursors[-2])}) as resp:
        again = [e async for e in sse(resp)]
    assert [e["data"]["text"] for e in again if e["event"] == "message"] == ["succeeded"]


async def test_step_document_groups_attempts_with_transitions(stack: StackFactory) -> None:
    s = await stack(runners=2)
    mixed = "for i in $(seq 1 50); do echo o$i; echo e$i >&2; done; printf 'bad \\377\\376!\\n'"
    doc = {
        "steps": [
            {"id": "flaky", "command": mixed + "; exit 3", "retries": 1},
            {"id": "after", "command": "echo never", "dependsOn": ["flaky"]},
            {
                "id": "wide",
                "command": "head -c 1048576 /dev/zero | tr '\\0' x; echo; "
                "printf a; yes é | head -n 10000 | tr -d '\\n'; echo",
            },
        ]
    }
    run_id = await s.submit(doc)
    run = await s.wait_run(run_id)
    assert run["status"] == "failed"
    flaky = await step_doc(s, run_id, "flaky")
    assert flaky["status"] == "failed" and flaky["runId"] == run_id
    assert [g["attempt"] for g in flaky["logs"]] == [1, 2]
    for group in flaky["logs"]:
        lines = group["lines"]
        assert texts(lines, "stdout") == [f"o{i}" for i in range(1, 51)] + ["bad \ufffd\ufffd!"]
        assert texts(lines, "stderr") == [f"e{i}" for i in range(1, 51)]
        assert [x["cursor"] for x in lines] == sorted(x["cursor"] for x in lines)
        assert not group["truncated"] and group["lineCount"] == len(lines)
        assert all(x["time"].endswith("Z") and x["attempt"] == group["attempt"] for x in lines)
    notes = [texts(g["lines"], "heddle") for g in flaky["logs"]]
    assert notes[0][-2] == "failed: exit code 3"
    assert notes[0][-1].startswith("retrying in ") and notes[0][-1].endswith("(attempt 2 of 2)")
    assert notes[1][-1] == "failed: exit code 3 (attempt 2 of 2, none left)"
    # A skipped step never had an attempt: the orchestrator's note is under attempt 0.
    after = await step_doc(s, run_id, "after")
    assert after["logs"] == [
        {
            "attempt": 0,
            "lineCount": 1,
            "truncated": False,
            "lines": [
                {
                    **after["logs"][0]["lines"][0],
                    "seq": 0,
                    "stream": "heddle",
                    "text": "skipped because step flaky failed",
                }
            ],
        }
    ]
    assert not after["logsExpired"]
    # ?tail=N: the last N lines of every attempt.
    tail = await step_doc(s, run_id, "flaky", "?tail=2")
    assert [[x["text"] for x in g["lines"]] for g in tail["logs"]] == [notes[0][-2:], notes[1][-2:]]
    assert all(g["truncated"] and g["lineCount"] > 100 for g in tail["logs"])
    # A 1 MiB line comes in pieces of HEDDLE_LOG_LINE_MAX_BYTES, cut between characters.
    wide = texts(await all_lines(s, run_id, "wide"), "stdout")
    assert [len(x) for x in wide[:64]] == [16384] * 64 and "".join(wide[:64]) == "x" * 2**20
    assert len(wide[64].encode()) == 16383 and "".join(wide[64:]) == "a" + "é" * 10000
    # Errors: unknown run or step, bad ids and parameters.
    for path, want in [
        ("/api/runs/nope/steps/flaky", 404),
        (f"/api/runs/{run_id}/steps/nope", 404),
        (f"/api/runs/{run_id}/steps/no.pe", 400),
        (f"/api/runs/{run_id}/steps/flaky?tail=-1", 400),
        (f"/api/runs/{run_id}/steps/flaky/logs?follow=maybe", 400),
        (f"/api/runs/{run_id}/steps/flaky/logs?after=x", 400),
        ("/api/runs/nope/steps/flaky/logs?follow=1", 404),
    ]:
        status, body = await s.request("GET", path)
        assert (status, "error" in body) == (want, True), (path, status, body)


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
        "namespace": "default",
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


async def test_200k_lines_all_stored_in_order(stack: StackFactory) -> None:
    s = await stack(runners=2)
    run_id = await s.submit(
        {
            "steps": [
                {"id": "seq", "command": "seq 1 200000"},
                {"id": "devnull", "command": "seq 1 200000 >/dev/null"},
            ]
        }
    )
    run = await s.wait_run(run_id, timeout=60)
    assert run["status"] == "succeeded"
    t0 = time.monotonic()
    lines = await all_lines(s, run_id, "seq")
    read_s = time.monotonic() - t0
    assert texts(lines, "stdout") == [str(i) for i in range(1, 200001)]
    assert [x["seq"] for x in lines] == list(range(1, len(lines) + 1))
    tail = await step_doc(s, run_id, "seq", "?tail=3")
    assert [x["text"] for x in tail["logs"][0]["lines"]] == ["199999", "200000", "succeeded"]
    # 200,000 lines and two notes: started on runner X (pid N), succeeded.
    assert tail["logs"][0]["lineCount"] == 200002 and tail["logs"][0]["truncated"]
    t0 = time.monotonic()
    default = await step_doc(s, run_id, "seq")
    doc_s = time.monotonic() - t0
    assert len(default["logs"][0]["lines"]) == 1000  # the default cap
    assert default["logs"][0]["lines"] == lines[-1000:]
    # A raw message, as `nats stream view HEDDLE_LOGS` shows it, is the lines as the command
    # wrote them, its stream and first line's number in headers; the line's cursor is its
    # stream sequence and its index in the chunk.
    sseq, index = divmod(lines[500]["cursor"], 4096)
    nc = await s.connect()
    try:
        raw = await nc.jetstream().get_msg(names.LOGS_STREAM, seq=sseq)
        subject = raw.subject  # the runner's own: heddle.log.<run>.<step>.<attempt>.<ns>.<it>
        info = await nc.jetstream().stream_info(names.LOGS_STREAM, subjects_filter=subject)
    finally:
        await nc.close()
    # A message per pipe read, not per line: 200,002 lines in a few hundred messages.
    assert info.state.subjects[subject] < 2000
    assert raw.subject.startswith(f"heddle.log.{run_id}.seq.1.default.runner-")
    chunk = raw.data.split(b"\n")
    assert raw.headers is not None
    assert raw.headers[names.LOG_STREAM_HEADER] == "stdout"
    assert chunk[index] == b"500" and int(raw.headers[names.LOG_SEQ_HEADER]) + index == 501
    first = int(raw.headers[names.LOG_SEQ_HEADER])
    # Line n of the attempt is "n - 1": the first is the runner's note.
    assert raw.data == b"\n".join(b"%d" % (first + i - 1) for i in range(len(chunk)))
    assert 1 < len(chunk) <= MAX_CHUNK_LINES
    took = {st["id"]: parse(st["finishedAt"]) - parse(st["startedAt"]) for st in run["steps"]}
    print(
        f"\n200k lines: step {took['seq'].total_seconds():.2f} s, same without logs "
        f"{took['devnull'].total_seconds():.2f} s, read back over HTTP in {read_s:.2f} s, "
        f"step document (last 1000 lines) in {doc_s * 1000:.0f} ms"
    )


@pytest.mark.fault
async def test_runner_killed_mid_step_keeps_its_lines(stack: StackFactory) -> None:
    s = await stack(runners=2)
    cmd = (
        'if [ "$HEDDLE_ATTEMPT" = 1 ]; then echo before-1; echo before-2 >&2; sleep 60; fi; '
        "echo second"
    )
    run_id = await s.submit({"steps": [{"id": "victim", "command": cmd, "retries": 1}]})
    deadline = time.monotonic() + 20
    while True:
        doc = await step_doc(s, run_id, "victim")
        seen = {x["text"] for g in doc["logs"] for x in g["lines"]}
        if doc["status"] == "running" and {"before-1", "before-2"} <= seen:
            break
        assert time.monotonic() < deadline, doc
        await asyncio.sleep(0.05)
    victim = doc["runner"]
    s.kill(victim, with_group=True)
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "succeeded"
    doc = await step_doc(s, run_id, "victim")
    first, second = doc["logs"]
    assert (first["attempt"], second["attempt"]) == (1, 2)
    assert first["lines"][0]["text"].startswith(f"started on runner {victim} (pid ")
    assert {x["text"] for x in first["lines"][1:3]} == {"before-1", "before-2"}
    assert first["lines"][-2]["text"].startswith(f"killed by the watchdog: runner {victim} silent")
    assert first["lines"][-1]["text"] == "retrying now (attempt 2 of 2)"
    other = next(r for r in ("runner-0", "runner-1") if r != victim)
    assert texts(second["lines"], "heddle")[0].startswith(f"started on runner {other} (pid ")
    assert texts(second["lines"], "stdout") == ["second"]


async def test_retention_expired_logs_still_read(stack: StackFactory) -> None:
    s = await stack(runners=1, HEDDLE_LOG_MAX_AGE="1", HEDDLE_LOG_MAX_BYTES=str(64 * 2**20))
    nc = await s.connect()
    try:
        config = (await nc.jetstream().stream_info(names.LOGS_STREAM)).config
    finally:
        await nc.close()
    assert (config.max_age, config.max_bytes, config.discard) == (1.0, 64 * 2**20, "old")
    run_id = await s.submit({"steps": [{"id": "hi", "command": "echo hello"}]})
    await s.wait_run(run_id)
    deadline = time.monotonic() + 15
    while not (doc := await step_doc(s, run_id, "hi"))["logsExpired"]:
        assert time.monotonic() < deadline, doc
        await asyncio.sleep(0.2)
    assert doc["status"] == "succeeded" and doc["stdoutTail"] == "hello"
    assert doc["logs"] == [
        {"attempt": 1, "lineCount": 0, "truncated": False, "lines": [], "expired": True}
    ]
    status, body = await s.request("GET", f"/api/runs/{run_id}/steps/hi/logs")
    assert (status, body["lines"], body["logsExpired"]) == (200, [], True)
    assert (await s.run(run_id))["status"] == "succeeded"
