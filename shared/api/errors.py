"""The client's errors, typed so a caller (the command line first) maps each to what it
does in one place: ``Usage`` (the call cannot be made as given), ``BadDocument`` (a
workflow with problems, found before anything is sent), ``Refused`` (the gateway answered
with an error status, its error and every problem it listed), ``Unreachable`` (no answer
at all, or one that is not the API's) and ``TimedOut`` (a run not over in the time given).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from heddle.shared.api.answers import ProblemDoc
from heddle.shared.wire.errors import Problem

if TYPE_CHECKING:
    from heddle.shared.api.answers import RunDocument


class ClientError(Exception):
    """Base of the client's errors."""


class Usage(ClientError):
    """The call cannot be sent as given (an unreadable token file, a bad URL or name)."""


class BadDocument(Usage):
    """A workflow that cannot be sent: unreadable, not JSON or YAML, or with problems, each
    one listed as the gateway would list it."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} problem(s)")

    def lines(self) -> list[str]:
        return [f"{p.path or '(document)'}: {p.message}" for p in self.problems]


class Refused(ClientError):
    """The gateway answered with an error status: ``error`` says what is wrong, ``problems``
    lists each place to fix (empty when it gave none). The message holds all of them."""

    def __init__(
        self, status: int, message: str, error: str = "", problems: list[ProblemDoc] | None = None
    ) -> None:
        self.status = status
        self.error = error or message
        self.problems = problems or []
        super().__init__(message)


class Unreachable(ClientError):
    """The gateway did not answer, or answered with what the API never sends."""

    def __init__(self, url: str, reason: object) -> None:
        self.url = url
        super().__init__(f"the gateway at {url} did not answer: {reason}")


class TimedOut(ClientError, TimeoutError):
    """A run waited for did not end within the time given; ``last`` is how it was seen last."""

    def __init__(self, run_id: str, timeout: float, last: RunDocument | None) -> None:
        self.run_id = run_id
        self.last = last
        super().__init__(f"run {run_id} did not end within {timeout:g} s")
