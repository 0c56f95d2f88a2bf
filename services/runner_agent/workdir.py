"""A step's working directory: fresh for each attempt, private to the step, and gone with
everything in it before the runner takes another step (docs/security.md, "Security").

Each attempt gets ``<base>/<holder>/work``. The base is the runner's, made once per process
(in memory, under ``/dev/shm``, where it has room: on a disk-backed temporary directory each
directory made and removed waits on the filesystem's journal), mode 0711: steps pass
through it but can neither list it nor write in it. The holder is made for the attempt
by the runner; where steps run as another user it is sticky, writable by all and listable by
none (as the outputs directory), so the launcher, which runs as the step user, makes
``work`` in it (0700, the step user's from its start: no CAP_CHOWN) and starts the command
there. Whatever a step puts beside ``work`` is in the holder too, and goes with it.

The command starts in it, with ``HEDDLE_WORKDIR``, ``TMPDIR`` and ``PWD`` naming it, and
``HOME`` too where the step user has no home of its own. Once the attempt is over (and,
with a uid of the runner's own, its launcher has killed every process of the uid) the
runner removes it: an empty one at once, else from a thread, under the step user's
filesystem ids (file_ids.py) with leftovers.remove, which follows no link.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import os
import secrets
import shlex
import shutil
import stat
import tempfile

from heddle.services.runner_agent import leftovers
from heddle.services.runner_agent.file_ids import filesystem_ids
from heddle.services.runner_agent.isolation import NO_HOME, StepUser
from heddle.services.runner_agent.launcher import Launcher, LauncherError

log = logging.getLogger("heddle.runner")
MEMORY_DIR = "/dev/shm"
# A working directory holds whatever its step writes: in memory only where there is room
# (a container gets 64 MiB of /dev/shm by default), else in the temporary directory.
MEMORY_MIN_BYTES = 1 << 30
WORK = "work"
_base: str | None = None


def _holder() -> str:
    """A new holder, in this process's base, made at the first attempt (and again if a
    cleaner of temporary files took it)."""
    global _base
    for _ in range(2):
        if _base is None:
            _base = tempfile.mkdtemp(prefix="heddle-work-", dir=_memory())
            os.chmod(_base, 0o711)  # passed through by the step user, listed by no one
            atexit.register(shutil.rmtree, _base, True)
        path = os.path.join(_base, secrets.token_hex(8))  # unlistable: unguessable
        try:
            os.mkdir(path, 0o700)
            return path
        except FileNotFoundError:
            _base = None
    raise FileNotFoundError(f"{path}: the working directories' directory keeps vanishing")


def _memory() -> str | None:
    """MEMORY_DIR where it is a directory this process may write with room for steps."""
    try:
        fs = os.statvfs(MEMORY_DIR)
    except OSError:
        return None
    roomy = fs.f_blocks * fs.f_frsize >= MEMORY_MIN_BYTES
    return MEMORY_DIR if roomy and os.access(MEMORY_DIR, os.W_OK | os.X_OK) else None


class Workdir:
    """One attempt's working directory, ``path``. Without a step user it exists on return;
    with one, the launcher makes it as it spawns the command (StepProcess's ``cwd``)."""

    def __init__(self, run_as: StepUser | None) -> None:
        self.run_as = run_as
        self.holder = _holder()
        self.path = os.path.join(self.holder, WORK)
        if run_as is None:
            os.mkdir(self.path, 0o700)
        else:
            os.chmod(self.holder, 0o1733)

    async def remove(self, launcher: Launcher | None = None) -> bool:
        """The directory gone with all it holds (True), ``launcher``'s uid swept first if
        the launcher was lost. Raises nothing: what cannot be removed is logged."""
        if launcher is not None and launcher.sweep and launcher.pid is None:
            try:  # a new one kills every process of the uid before it answers
                launcher.start()
            except (LauncherError, OSError) as exc:
                log.warning("working directory removed with no launcher to sweep: %s", exc)
        if _rmdir(self.path) and _rmdir(self.holder):  # nothing in it: no thread, no switch
            return True
        try:
            gone = await asyncio.to_thread(_remove_holder, self.holder, self.run_as)
        except Exception as exc:  # a cleanup never keeps the runner from its next step
            log.warning("working directory %s not removed: %s", self.path, exc)
            return False
        if not gone:
            log.warning("working directory %s not wholly removed", self.path)
        return gone


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:  # not empty, or no longer a directory
        return False
    return True


def _remove_holder(holder: str, run_as: StepUser | None) -> bool:
    """Everything in ``holder`` removed with the step user's rights, then the holder."""
    return remove_entries(holder, None, run_as) and _rmdir(holder)


def remove_entries(directory: str, names: list[str] | None, run_as: StepUser | None) -> bool:
    """``names`` in the runner's ``directory`` (every entry if None) removed with the step
    user's rights (leftovers.remove, which follows no link); True once all are gone."""
    try:
        fd = os.open(directory, leftovers.DIR_FLAGS)  # the runner's: read as the runner
    except FileNotFoundError:
        return True
    try:
        todo = os.listdir(fd) if names is None else names
        ids = filesystem_ids(run_as.uid, run_as.gid) if run_as else contextlib.nullcontext()
        with ids:
            gone = [leftovers.remove(fd, name) for name in todo]  # every one tried
    finally:
        os.close(fd)
    return all(gone)


def workdir_env(env: dict[str, str], path: str, run_as: StepUser | None) -> dict[str, str]:
    """``env`` for a command started in working directory ``path``. It overrides the
    step's own TMPDIR, as the step user's HOME does."""
    extra = {"HEDDLE_WORKDIR": path, "TMPDIR": path, "PWD": path}
    if run_as is not None and not has_home(run_as.home, run_as.uid):
        extra["HOME"] = path  # no dotfiles left for the next step (isolation.NO_HOME)
    return {**env, **extra}


@functools.lru_cache(maxsize=16)
def has_home(home: str, uid: int) -> bool:
    """Whether ``home`` is a directory of ``uid``'s own."""
    if home == NO_HOME:
        return False
    try:
        info = os.stat(home)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid


def entering(path: str, argv: list[str]) -> list[str]:
    """``argv`` (``/bin/sh -c COMMAND``) with the shell going to ``path`` first, on the
    command's first line (its line numbers stay): os.posix_spawn has no chdir, and the
    runner's own working directory is its whole process's."""
    shell, flag, command = argv
    return [shell, flag, f"cd -- {shlex.quote(path)} || exit 1; unset OLDPWD; {command}"]
