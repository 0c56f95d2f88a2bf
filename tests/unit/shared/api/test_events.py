"""Server-sent events as the client reads them, and how long it waits for a run, without
I/O (shared/api/events.py, waiting.py). Against a real stack: tests/integration/test_client.py."""

from __future__ import annotations

import json

import msgspec
import pytest
from heddle.shared.api.answers import LineDoc, RunDocument, RunEnd, StepChange, StepDocument
from heddle.shared.api.errors import Refused, TimedOut, Unreachable
from heddle.shared.api.events import Event, EventLines, LogEnd, Tracked, log_event, run_event
from heddle.shared.api.waiting import APPEAR_WAIT, OUTAGE_WAIT, Patience


def events(text: str) -> list[Event]:
    parser = EventLines()
    found = [parser.feed(line) for line in text.splitlines(keepends=True)]
    return [e for e in found if e is not None]


def test_lines_make_events_and_keepalives_are_dropped() -> None:
    text = ': keepalive\n\nevent: step\ndata: {"a":\ndata:  1}\n\nid: 7\ndata: x\r\n\r\n'
    assert events(text) == [Event("step", '{"a":\n 1}'), Event("message", "x")]
    assert events("event: end\n\n") == []  # no data, no event


def answer(kind: type[msgspec.Struct], **given: object) -> dict[str, object]:
    """An answer of ``kind`` as the gateway would encode it: ``given``, and every other
    required field at its empty value (null where it may be, else an empty list, map or
    text, 0)."""
    info = msgspec.inspect.type_info(kind)
    assert isinstance(info, msgspec.inspect.StructType)
    doc: dict[str, object] = {}
    for field in (f for f in info.fields if f.required):
        options = (
            field.type.types if isinstance(field.type, msgspec.inspect.UnionType) else [field.type]
        )
        empty = {
            msgspec.inspect.NoneType: None,
            msgspec.inspect.ListType: [],
            msgspec.inspect.DictType: {},
            msgspec.inspect.StrType: "",
            msgspec.inspect.BoolType: False,
            msgspec.inspect.IntType: 0,
            msgspec.inspect.FloatType: 0.0,
        }
        kinds = [type(t) for t in options]
        doc[field.encode_name] = next((empty[k] for k in empty if k in kinds), None)
    return doc | {msgspec.to_builtins(k): v for k, v in given.items()}


def step_doc(step_id: str, status: str = "pending") -> dict[str, object]:
    return answer(StepDocument, id=step_id, command="true", status=status, timeoutSeconds=60.0)


def run_doc(*steps: str) -> RunDocument:
    doc = answer(
        RunDocument,
        runId="r",
        namespace="default",
        status="running",
        createdAt="2026-01-01T00:00:00.000Z",
        trigger="api",
        stepCount=len(steps),
        stepsIncluded=True,
        steps=[step_doc(s) for s in steps],
    )
    return msgspec.json.decode(json.dumps(doc), type=RunDocument)


def test_a_run_is_kept_current_by_its_events() -> None:
    change = {"stepId": "a", "status": "failed", "attempt": 1, "runner": "r-0", "exitCode": 3}
    change |= dict.fromkeys(("reason", "startedAt", "finishedAt", "retryAt", "queuedAt"))
    tracked = Tracked(run_doc("a", "b"))
    step = run_event(Event("step", json.dumps(change)))
    assert isinstance(step, StepChange) and tracked.apply(step)
    a = tracked.run.steps[0]
    assert (a.status, a.attempt, a.runner, a.exit_code) == ("failed", 1, "r-0", 3)
    assert tracked.run.steps[1].status == "pending"
    # A step the document does not list (a run's summary lists none) changes nothing.
    assert not tracked.apply(msgspec.structs.replace(step, step_id="zz"))
    end = {"runId": "r", "status": "failed", "finishedAt": "t1", "counts": {"failed": 1}}
    over = run_event(Event("end", json.dumps(end)))
    assert isinstance(over, RunEnd) and tracked.apply(over)
    assert (tracked.run.status, tracked.run.finished_at, tracked.run.counts) == (
        "failed",
        "t1",
        {"failed": 1},
    )
    assert run_event(Event("later", "{}")) is None  # a kind this client does not know


def test_a_followed_log_is_lines_then_its_end() -> None:
    line = {"cursor": 5, "attempt": 1, "seq": 1, "stream": "stdout", "time": "t", "text": "hi"}
    assert log_event(Event("message", json.dumps(line))) == LineDoc(5, 1, 1, "stdout", "t", "hi")
    end = {"status": "succeeded", "attempt": 1, "exitCode": 0, "reason": None, "cursor": 5}
    assert log_event(Event("end", json.dumps(end | {"finishedAt": "t"}))) == LogEnd(
        status="succeeded", attempt=1, exit_code=0, finished_at="t", cursor=5
    )


def test_a_wait_bears_a_run_not_stored_yet_and_a_gateway_away_for_a_while() -> None:
    patience = Patience("r", None, now=100.0)
    unknown = Refused(404, "HTTP 404: no such run")
    patience.bear(unknown, now=100.0 + APPEAR_WAIT)
    with pytest.raises(Refused):
        patience.bear(unknown, now=100.1 + APPEAR_WAIT)
    away = Unreachable("http://gw", "refused")
    patience.bear(away, now=100.0 + OUTAGE_WAIT)
    with pytest.raises(Unreachable):
        patience.bear(away, now=100.1 + OUTAGE_WAIT)
    patience.answered(run_doc("a"), now=200.0)
    with pytest.raises(Refused):  # once seen, a 404 is the run gone: not waited out
        patience.bear(unknown, now=200.0)
    with pytest.raises(Refused):
        patience.bear(Refused(403, "HTTP 403: forbidden"), now=200.0)


def test_a_wait_ends_at_its_timeout_with_the_run_as_last_seen() -> None:
    patience = Patience("r", 5.0, now=10.0)
    assert patience.left(now=11.0) == 4.0
    assert patience.pause(0.5, now=11.0) == 0.5 and patience.pause(0.5, now=14.8) == pytest.approx(
        0.2
    )
    patience.answered(run_doc("a"), now=12.0)
    with pytest.raises(TimedOut) as out:
        patience.left(now=15.0)
    assert out.value.last is not None and out.value.last.run_id == "r"
    assert isinstance(out.value, TimeoutError) and "run r did not end within 5 s" in str(out.value)
    assert Patience("r", None, now=0.0).left(now=1e9) is None
