"""shared/runtime/service.py's structured logging: one JSON object per line, the same shape on the
fast path of ``event`` (a state change) and through the logging module (warnings, errors)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator

import nats
import pytest
from heddle.shared.broker.nats_io import close
from heddle.shared.runtime.service import _EventStream, event, setup_logging
from heddle.shared.runtime.settings import Settings

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def logged(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], list[dict]]]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)

    def lines() -> list[dict]:
        return [json.loads(line) for line in capsys.readouterr().err.splitlines()]

    yield lines
    root.handlers[:], _ = saved
    root.setLevel(saved[1])
    _EventStream.handler = None


def test_an_event_is_one_json_line_with_its_fields(logged) -> None:
    setup_logging(Settings())
    log = logging.getLogger("heddle.test")

    class Odd:
        def __str__(self) -> str:
            return "odd"

    event(log, "step", run="r1", step="a", attempt=2, status="running", reason=None, x=Odd())
    log.warning("watch lost: %s", "timeout")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("handling failed")
    first, second, third = logged()
    assert STAMP.match(first.pop("ts")) and STAMP.match(second.pop("ts"))
    assert first == {
        "level": "info",
        "logger": "heddle.test",
        "msg": "step",
        "run": "r1",
        "step": "a",
        "attempt": 2,
        "status": "running",
        "reason": None,
        "x": "odd",
    }
    assert second == {"level": "warning", "logger": "heddle.test", "msg": "watch lost: timeout"}
    assert third["level"] == "error" and "ValueError: boom" in third["exc"]


def test_events_follow_the_log_level(logged) -> None:
    setup_logging(Settings(log_level="warning"))
    event(logging.getLogger("heddle.test"), "step", run="r1")
    assert logged() == []


def test_without_the_services_set_up_an_event_goes_through_logging(
    logged, caplog: pytest.LogCaptureFixture
) -> None:
    _EventStream.handler = None
    with caplog.at_level(logging.INFO):
        event(logging.getLogger("heddle.test"), "run", run="r9", status="succeeded")
    [record] = [r for r in caplog.records if r.name == "heddle.test"]
    assert record.getMessage() == "run" and record.fields == {"run": "r9", "status": "succeeded"}


async def test_closing_a_connection_logs_what_it_carried(logged, nats_server) -> None:
    """The last line of a service's NATS connection: its messages and bytes, both ways."""
    setup_logging(Settings())
    nc = await nats.connect(nats_server.url)
    sub = await nc.subscribe("heddle.test.carried")
    for n in range(5):
        await nc.publish("heddle.test.carried", b"x" * n)
    assert [(await sub.next_msg(timeout=5)).data for _ in range(5)] == [b"x" * n for n in range(5)]
    await close(nc)
    (line,) = [line for line in logged() if line["msg"] == "nats closed"]
    assert line["logger"] == "heddle.nats"
    assert (line["messages_in"], line["messages_out"]) == (5, 5)
    assert (line["bytes_in"], line["bytes_out"]) == (10, 10)
    assert line["reconnects"] == 0
