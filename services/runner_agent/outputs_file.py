"""The file a step writes its outputs to (``$HEDDLE_OUTPUTS``), one per attempt.

The runner makes it before the command starts, in a directory of its own made once per
process (in memory, under ``/dev/shm``, where there is one), under a random name, and keeps
it open; after a success it reads the outputs through that descriptor, never through the
path, so a step that swaps the file for a link to something else (one of the runner's own
files) still has only what it wrote to the file read. Where steps run as another user the
runner makes the file under the step user's filesystem ids (file_ids.py), so it is theirs
from the start without CAP_CHOWN; the directory stays the runner's, sticky and not listable,
so a step can find no other file there and remove none but its own. The contents are parsed
by ``shared/core/outputs.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable

from heddle.services.runner_agent import file_watch
from heddle.services.runner_agent.file_ids import filesystem_ids
from heddle.services.runner_agent.isolation import StepUser
from heddle.services.runner_agent.workdir import remove_entries
from heddle.shared.core.outputs import OutputsError, parse_outputs, size_problem

log = logging.getLogger("heddle.runner")
_directory: str | None = None
_open: set[str] = set()  # the outputs files of attempts not yet ended, by path
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
    def __init__(
        self,
        run_as: StepUser | None = None,
        limit: int | None = None,
        too_large: Callable[[str], None] | None = None,
    ) -> None:
        """``limit``: the file is watched, emptied as soon as it is found past the limit, and
        ``too_large`` told why (the attempt's reason) the first time."""
        self.path = os.path.join(_own_directory(run_as), secrets.token_hex(16))
        self.run_as = run_as
        self.limit = limit
        self.too_large = too_large
        self.seen_size: int | None = None  # found past the limit while the step ran
        self._watch: file_watch.Watch | None = None
        watcher = file_watch.running() if limit is not None else None
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        if run_as is None:
            self.fd: int | None = os.open(self.path, flags, 0o600)
        else:
            with filesystem_ids(run_as.uid, run_as.gid):
                self.fd = os.open(self.path, flags, 0o600)
        _open.add(self.path)
        # The directory is watched, the runner's own (no step may read it).
        self._watch = _watched(watcher, self.path, self._changed)

    def _changed(self) -> None:
        """Written to: past the limit, emptied before the step is killed, so its memory is
        back at once, and again at each write seen from a step that goes on writing."""
        fd, limit = self.fd, self.limit
        if fd is None or limit is None:
            return
        size = os.fstat(fd).st_size
        if size <= limit:
            return
        try:
            os.ftruncate(fd, 0)
        finally:  # killed even if it could not be emptied
            if self.seen_size is None:
                self.seen_size = size
                if self.too_large is not None:
                    self.too_large(f"bad outputs: {size_problem(size, limit)}")

    def read(self, limit: int) -> dict[str, str]:
        """The outputs written; raises OutputsError (too large, malformed)."""
        assert self.fd is not None
        size = self.seen_size if self.seen_size is not None else os.fstat(self.fd).st_size
        data = os.pread(self.fd, min(size, limit), 0) if size <= limit else b""
        return parse_outputs(data, limit, size)

    def take(self, succeeded: bool, limit: int) -> dict[str, str] | str:
        """The outputs of a succeeded attempt, or why they fail it; a failed attempt's are
        dropped unread: only a success passes outputs on. The file is closed."""
        try:
            return self.read(limit) if succeeded else {}
        except OutputsError as exc:
            return f"bad outputs: {exc}"
        except OSError as exc:
            return f"outputs not read: {exc}"
        finally:
            self.close()

    def close(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        _open.discard(self.path)
        if fd is not None and self.run_as is not None:
            _remove_strays(self.run_as)


def _remove_strays(run_as: StepUser) -> None:
    """What a step made beside its outputs file, under a name of its choosing, goes with its
    attempt: a later step of the same uid could read it by that name. Removed as the step
    user (leftovers.remove), never following a link; the directory holds no other attempt's
    file but those in ``_open``."""
    directory = _directory
    if directory is None:
        return
    try:
        with os.scandir(directory) as listing:
            strays = [e.name for e in listing if e.path not in _open]
    except OSError:
        return
    if strays:
        remove_entries(directory, strays, run_as)


def _watched(
    watcher: file_watch.FileWatch | None, path: str, changed: Callable[[], None]
) -> file_watch.Watch | None:
    """The file at ``path`` watched through its directory; None where it cannot be, with a
    warning."""
    if watcher is None:
        return None
    try:
        return watcher.add(path, changed)
    except OSError as exc:
        log.warning("outputs file not watched (%s): bounded only once the step exits", exc)
        return None
