"""A step's start is announced only if it outlives HEDDLE_STARTED_REPORT_DELAY: a short step
is reported once, by its outcome, which carries its start time and pid; a longer one is
seen running, with its started event and its log's first note, as soon as the delay has
passed (docs/latency.md, "Reporting a start")."""

from __future__ import annotations

import time

from heddle.shared.wire import names

from tests.support.logs import all_lines, texts
from tests.support.stack import Stack, StackFactory


async def stored_events(s: Stack, run_id: str, step_id: str, kind: str) -> int:
    """How many ``kind`` events of a step HEDDLE_EVENTS holds."""
    nc = await s.connect()
    try:
        subject = names.evt_step_kind(run_id, step_id, kind)
        info = await nc.jetstream().stream_info(names.EVENTS_STREAM, subjects_filter=subject)
        return sum((info.state.subjects or {}).values())
    finally:
        await nc.close()


async def test_a_short_step_is_reported_once_by_its_outcome(stack: StackFactory) -> None:
    s = await stack(runners=1, HEDDLE_STARTED_REPORT_DELAY="5")
    run_id = await s.submit({"steps": [{"id": "a", "command": "echo hi"}]})
    doc = await s.wait_run(run_id)
    assert doc["status"] == "succeeded"
    step = doc["steps"][0]
    (attempt,) = step["attempts"]
    # The outcome says when and as which process the command started.
    assert attempt["pid"] > 0 and attempt["startedAt"] == step["startedAt"]
    assert step["queuedAt"] <= step["startedAt"] <= step["finishedAt"]
    assert await stored_events(s, run_id, "a", "started") == 0
    assert await stored_events(s, run_id, "a", "finished") == 1
    # The log's first note still comes first, before the output.
    lines = await all_lines(s, run_id, "a")
    assert [(x["stream"], x["text"]) for x in lines] == [
        ("heddle", f"started on runner runner-0 (pid {attempt['pid']})"),
        ("stdout", "hi"),
        ("heddle", "succeeded"),
    ]
    # A step that printed nothing: its whole log is one message of two lines.
    quiet = await s.submit({"steps": [{"id": "q", "command": "true"}]})
    doc = await s.wait_run(quiet)
    pid = doc["steps"][0]["attempts"][0]["pid"]
    lines = await all_lines(s, quiet, "q")
    assert texts(lines, "heddle") == [f"started on runner runner-0 (pid {pid})", "succeeded"]
    assert lines[1]["cursor"] == lines[0]["cursor"] + 1  # the same message
    assert await stored_events(s, quiet, "q", "started") == 0


async def test_a_longer_step_is_seen_running_once_the_delay_passed(stack: StackFactory) -> None:
    s = await stack(runners=1, HEDDLE_STARTED_REPORT_DELAY="0.3")
    run_id = await s.submit({"steps": [{"id": "a", "command": "sleep 3"}]})
    t0 = time.monotonic()
    step = await s.wait_step(run_id, "a", {"running"}, timeout=2.5)
    assert time.monotonic() - t0 < 2.5  # well before the command ends
    pid = step["attempts"][0]["pid"]
    assert pid > 0
    assert await stored_events(s, run_id, "a", "started") == 1
    lines = await all_lines(s, run_id, "a")
    assert texts(lines, "heddle") == [f"started on runner runner-0 (pid {pid})"]
    doc = await s.wait_run(run_id)
    assert doc["status"] == "succeeded"
    assert texts(await all_lines(s, run_id, "a"), "heddle")[1:] == ["succeeded"]


async def test_a_delay_of_zero_reports_every_start_at_once(stack: StackFactory) -> None:
    s = await stack(runners=1, HEDDLE_STARTED_REPORT_DELAY="0")
    run_id = await s.submit({"steps": [{"id": "a", "command": "true"}]})
    assert (await s.wait_run(run_id))["status"] == "succeeded"
    assert await stored_events(s, run_id, "a", "started") == 1
    lines = await all_lines(s, run_id, "a")
    assert texts(lines, "heddle")[1] == "succeeded"
    assert lines[1]["cursor"] > lines[0]["cursor"] + 1  # two messages
