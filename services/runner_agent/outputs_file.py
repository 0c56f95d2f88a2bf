"""The file a step writes its outputs to (``$HEDDLE_OUTPUTS``), one per attempt.

The runner makes it in a directory of its own before the command starts and keeps it open;
after a success it reads the outputs through that descriptor, never through the path, so a
step that swaps the file for a link to something else (one of the runner's own files) still
has only what it wrote to the file read. Where steps run as another user the file is
theirs and the directory stays the runner's (searchable, not writable), so the file cannot
be replaced at all. The contents are parsed by ``shared/outputs.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from services.runner_agent.isolation import StepUser
from shared.outputs import parse_outputs


class OutputsFile:
    def __init__(self, run_as: StepUser | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="heddle-outputs-")
        self.path = os.path.join(self.dir, "outputs")
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self.fd: int | None = os.open(self.path, flags, 0o600)
            if run_as is not None:
                os.fchown(self.fd, run_as.uid, run_as.gid)
                os.chmod(self.dir, 0o711)
        except BaseException:
            self.close()
            raise

    def read(self, limit: int) -> dict[str, str]:
        """The outputs written; raises OutputsError (too large, malformed)."""
        assert self.fd is not None
        size = os.fstat(self.fd).st_size
        data = os.pread(self.fd, min(size, limit), 0) if size <= limit else b""
        return parse_outputs(data, limit, size)

    def close(self) -> None:
        fd, self.fd = getattr(self, "fd", None), None
        if fd is not None:
            os.close(fd)
        shutil.rmtree(self.dir, ignore_errors=True)
