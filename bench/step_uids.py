"""A block of step uids for one benchmark stack, held for its life.

A runner started as root runs its steps as a uid of its own (HEDDLE_STEP_UIDS, runner-N the
N-th) and refuses one another runner on the machine holds. Stacks that run at once (bench.ab's
two sides, the smoke tests in parallel) would all take the default block, so each claims a
block of its own with a lock on a file of the block, kept until the stack stops.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

FIRST, LAST = 60600, 61099  # HEDDLE_STEP_UIDS' default range, shared out in blocks
BLOCK = 32  # runners a stack may have
LOCKS = Path(tempfile.gettempdir()) / "heddle-bench-step-uids"


class StepUidBlock:
    """``setting`` is HEDDLE_STEP_UIDS for the stack (``first`` its first uid); ``release``
    when it stops."""

    def __init__(self) -> None:
        LOCKS.mkdir(mode=0o700, exist_ok=True)
        for first in range(FIRST, LAST + 1 - BLOCK + 1, BLOCK):
            fd = os.open(LOCKS / f"block-{first}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.fd: int | None = fd
            self.first = first
            self.setting = f"{first}-{first + BLOCK - 1}"
            return
        raise RuntimeError(f"every block of step uids in {FIRST}-{LAST} is held by a stack")

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
