"""What a service logs, captured as the JSON lines it writes to stderr."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import pytest


@pytest.fixture
def logged(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], list[dict]]]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)

    def lines() -> list[dict]:
        return [json.loads(line) for line in capsys.readouterr().err.splitlines()]

    yield lines
    # The logging set-up as it was: the JSON handler a test installed is no longer the root
    # logger's only one, so ``event`` goes through the logging module again.
    root.handlers[:], _ = saved
    root.setLevel(saved[1])
