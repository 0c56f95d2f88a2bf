"""What a step's command ended with: its outcome, exit code and reason, and the last bytes of
its stdout and stderr.

Its own module: the attempt (attempt.py) makes one for a command that never ran, the process
(process.py) one for a command that exited; how an exit or a kill becomes an outcome is
decided here, apart from watching the process.
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.shared.wire.contracts import Outcome


@dataclass(frozen=True, slots=True)
class ProcessResult:
    outcome: Outcome
    exit_code: int | None
    reason: str | None
    stdout_tail: str
    stderr_tail: str


class Tail:
    """The last ``limit`` bytes written to a stream."""

    __slots__ = ("buf", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()

    def add(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > 2 * self.limit:
            del self.buf[: len(self.buf) - self.limit]

    def text(self) -> str:
        data = bytes(self.buf[-self.limit :]) if self.limit else b""
        return data.decode("utf-8", errors="replace").rstrip("\n")


def ended(
    killed: tuple[Outcome, str] | None, code: int | None, stdout: str, stderr: str
) -> ProcessResult:
    """A command's result from why it was killed (the first reason, if it was) and its exit
    code (None: not known)."""
    if killed:
        outcome, reason = killed
        return ProcessResult(outcome, code, reason, stdout, stderr)
    if code == 0:
        return ProcessResult("succeeded", 0, None, stdout, stderr)
    reason = (
        f"exit code {code}"
        if code is not None and code >= 0
        else f"killed by signal {-code}"
        if code is not None
        else "no exit code"
    )
    return ProcessResult("failed", code, reason, stdout, stderr)
