"""shared/runtime/service.py's structured logging, without I/O: one JSON object per line, the same
shape on the fast path of ``event`` (a state change) and through the logging module (warnings,
errors). What closing a connection logs, on a real nats-server:
tests/integration/test_service_logging.py."""

from __future__ import annotations

import logging
import re

import pytest
from heddle.shared.runtime.service import event, setup_logging
from heddle.shared.runtime.settings import Settings

from tests.support.service_logs import logged as logged  # the fixture

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


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
    """No setup_logging here: the root logger's handlers are pytest's, someone else's."""
    with caplog.at_level(logging.INFO):
        event(logging.getLogger("heddle.test"), "run", run="r9", status="succeeded")
    [record] = [r for r in caplog.records if r.name == "heddle.test"]
    assert record.getMessage() == "run" and record.fields == {"run": "r9", "status": "succeeded"}
