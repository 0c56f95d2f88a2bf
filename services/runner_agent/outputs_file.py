"""The file a step writes its outputs to (``$HEDDLE_OUTPUTS``), one per attempt.

The runner makes it before the command starts, in a directory of its own made once per
process (in memory, under ``/dev/shm``, where there is one), under a random name, and keeps
it open; after a success it reads the outputs through that descriptor, never through the
path, so a step that swaps the file for a link to something else (one of the runner's own
files) still has only what it wrote to the file read. Where steps run as another user the
runner makes the file under the step user's filesystem ids (file_ids.py), so it is theirs
from the start without CAP_CHOWN; the directory stays the runner's, sticky and not listable,
so a step can find no other file there and remove none but its own. The contents are parsed
by ``shared/outputs.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import tempfile

from services.runner_agent.file_ids import filesystem_ids
from services.runner_agent.isolation import StepUser
from shared.outputs import parse_outputs

_directory: str | None = None
# In memory: on a disk-backed /tmp (ext4, a container's overlay) making and removing a file
# waits behind the journal's other writers, up to a quarter of a millisecond per step.
MEMORY_DIR = "/dev/shm"


def _parent() -> str | None:
    """Where the directory goes: in memory if this machine has it, else the temporary
    directory."""
    if os.path.isdir(MEMORY_DIR) and os.access(MEMORY_DIR, os.W_OK | os.X_OK):
        return MEMORY_DIR
    return None


def _own_directory(run_as: StepUser | None) -> str:
    """This process's directory for outputs files, made at the first attempt: a directory
    per attempt cost a runner more than the rest of the file's handling."""
    global _directory
    if _directory is None or not os.path.isdir(_directory):
        _directory = tempfile.mkdtemp(prefix="heddle-outputs-", dir=_parent())
        if run_as is not None:
            # Files are made in it as the step user: writable by all, listable by none, and
            # sticky, so a step removes no file but its own (the runner, its owner, any).
            os.chmod(_directory, 0o1733)
        atexit.register(shutil.rmtree, _directory, True)
    return _directory


class OutputsFile:
    def __init__(self, run_as: StepUser | None = None) -> None:
        self.path = os.path.join(_own_directory(run_as), secrets.token_hex(16))
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        if run_as is None:
            self.fd: int | None = os.open(self.path, flags, 0o600)
        else:
            with filesystem_ids(run_as.uid, run_as.gid):
                self.fd = os.open(self.path, flags, 0o600)

    def read(self, limit: int) -> dict[str, str]:
        """The outputs written; raises OutputsError (too large, malformed)."""
        assert self.fd is not None
        size = os.fstat(self.fd).st_size
        data = os.pread(self.fd, min(size, limit), 0) if size <= limit else b""
        return parse_outputs(data, limit, size)

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
