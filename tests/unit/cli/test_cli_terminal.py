"""Where step-made text is printed on a terminal its control characters are shown as `cat -v`
shows them, without I/O (services/cli/terminal.py): only a terminal gets the escaped form,
and the live view escapes a step's reason. Against `cat -v` itself and through a real stack:
tests/integration/test_cli_terminal.py."""

from __future__ import annotations

import io
import os
from typing import Any

from heddle.services.cli import watch
from heddle.services.cli.terminal import for_output
from rich.console import Console

from tests.support.terminal import RAW, SHOWN


def test_only_a_terminal_gets_the_escaped_form() -> None:
    text = RAW.decode()
    master, slave = os.openpty()
    read_end, write_end = os.pipe()
    with open(slave, "w") as tty, open(write_end, "w") as pipe:
        assert for_output(text, tty) == SHOWN.decode()
        assert for_output(text, tty, raw=True) == text
        assert for_output(text, pipe) == text
        assert for_output(text, io.StringIO()) == text
    os.close(master)
    os.close(read_end)


def failed_run(reason: str) -> dict[str, Any]:
    step = {"id": "s", "status": "failed", "attempt": 1, "reason": reason}
    step |= {"startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}
    times = {"createdAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}
    return {"runId": "r", "status": "failed", "steps": [step], **times}


def test_the_live_view_shows_a_reason_escaped() -> None:
    """rich passes ESC through (it drops BEL alone): the view escapes first."""
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    sink = watch.LiveSink(console)
    run = failed_run(RAW.decode())
    sink.update(run)
    sink.close(run)
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b]" not in shown and "\x07" not in shown
    assert SHOWN.decode() in shown
