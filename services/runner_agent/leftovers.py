"""Removing what a step left in files, safe against a step that means harm.

``remove`` takes away one entry of an open directory and everything under it with
``shutil.rmtree``'s descriptor-based mode (no link followed, a directory swapped for a link
found out), and gets past what a step can put in its way: a directory it made unreadable or
unwritable is opened up again by its owner, and a tree deeper than rmtree's recursion is
moved up, level by level, until it is flat. It runs with the step user's rights alone (the
launcher is that user; the runner calls it under the step's filesystem ids), so nothing it
does reaches a file the step could not have removed itself.

``TempSweep`` removes what a uid of the runner's own made at the top of the shared temporary
directories. Standard library only: the step launcher (launcher_main.py, run with
``python -I -S``) loads this file by its path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import stat
import struct
from collections.abc import Iterable

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PASSES = 3  # rmtree, then opened up and flattened, and again: a live writer may still race
SHARED_TEMP = ("/tmp", "/var/tmp", "/dev/shm")
IN_MOVED_TO, IN_CREATE, IN_Q_OVERFLOW = 0x80, 0x100, 0x4000
IN_ONLYDIR = 0x01000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len of the name that follows


def remove(dir_fd: int, name: str) -> bool:
    """``name`` in the directory open at ``dir_fd`` removed with all it holds; True once it
    is gone. A link is removed, never followed."""
    for _ in range(PASSES):
        try:
            if not stat.S_ISDIR(os.lstat(name, dir_fd=dir_fd).st_mode):
                os.unlink(name, dir_fd=dir_fd)
                return True
        except FileNotFoundError:
            return True
        except OSError:
            return False
        failed = False

        def note(*_: object) -> None:
            nonlocal failed
            failed = True

        try:
            shutil.rmtree(name, onerror=note, dir_fd=dir_fd)
        except RecursionError:  # deeper than Python's stack: flattened below
            failed = True
        if not failed:
            return True
        _open_up(dir_fd, name)
    return not _exists(dir_fd, name)


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def _let_in(dir_fd: int, name: str) -> None:
    """Directory ``name`` readable, writable and searchable by its owner, and not sticky,
    where its owner (this caller) made it otherwise; a link is left as it is."""
    with contextlib.suppress(OSError, ValueError, NotImplementedError):
        mode = os.lstat(name, dir_fd=dir_fd).st_mode
        if stat.S_ISDIR(mode) and mode & 0o7700 != 0o700:
            # No link followed: a link swapped in meanwhile raises (ValueError, EOPNOTSUPP).
            os.chmod(name, 0o700, dir_fd=dir_fd, follow_symlinks=False)


def _open_up(dir_fd: int, name: str) -> None:
    """Every directory of the tree at ``name`` let in (``_let_in``) and moved up to be a
    child of its top under a new name: rmtree then goes two levels deep at most, with one
    descriptor per level, however deep the step made it."""
    _let_in(dir_fd, name)
    try:
        top = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return
    try:
        todo: list[str | None] = [None]  # the top's children to look into; None: the top
        while todo:
            _flatten_one(top, todo)
    finally:
        os.close(top)


def _flatten_one(top: int, todo: list[str | None]) -> None:
    child = todo.pop()
    try:
        fd = top if child is None else os.open(child, DIR_FLAGS, dir_fd=top)
    except OSError:
        return
    try:
        with os.scandir(fd) as listing:
            entries = [e.name for e in listing if e.is_dir(follow_symlinks=False)]
        for entry in entries:
            _let_in(fd, entry)
            if child is None:
                todo.append(entry)
                continue
            moved = os.urandom(8).hex()
            with contextlib.suppress(OSError):
                os.rename(entry, moved, src_dir_fd=fd, dst_dir_fd=top)
                todo.append(moved)
    except OSError:
        pass
    finally:
        if fd != top:
            os.close(fd)


class TempSweep:
    """The entries this process's uid made at the top of the shared temporary directories,
    removed at each ``sweep``: those inotify saw made since the one before (a lookup each),
    or all the directories hold where it cannot tell (the first sweep; events lost)."""

    def __init__(self, uid: int, paths: Iterable[str] = SHARED_TEMP) -> None:
        """``uid``: this process's, never root's (whose entries there are everyone's)."""
        if uid == 0 or uid != os.getuid() or uid != os.geteuid():
            raise ValueError(f"uid {uid}: only a step uid's own process sweeps its files")
        self.uid = uid
        self.everything = True
        self.dirs: dict[int, int] = {}  # watch (or a stand-in) -> the directory's descriptor
        self.events = _inotify()
        seen: set[tuple[int, int]] = set()
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue  # no such directory here
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) in seen:  # /var/tmp may be /tmp
                os.close(fd)
                continue
            seen.add((info.st_dev, info.st_ino))
            self.dirs[self._watch(path, -len(self.dirs) - 1)] = fd

    def _watch(self, path: str, stand_in: int) -> int:
        if self.events < 0:
            return stand_in
        mask = IN_CREATE | IN_MOVED_TO | IN_ONLYDIR
        wd = _libc.inotify_add_watch(self.events, os.fsencode(path), mask)
        return wd if wd >= 0 else stand_in  # out of watches: looked at whole each time

    def sweep(self) -> None:
        made = self._made()
        for wd, fd in self.dirs.items():
            names = made.get(wd, ()) if made is not None and wd >= 0 else None
            with contextlib.suppress(OSError):
                for name in os.listdir(fd) if names is None else names:
                    with contextlib.suppress(OSError):
                        if os.lstat(name, dir_fd=fd).st_uid == self.uid:
                            remove(fd, name)

    def _made(self) -> dict[int, set[str]] | None:
        """The names made in each watched directory since the last call; None: all must be
        looked at."""
        made: dict[int, set[str]] = {}
        lost = self.events < 0 or self.everything
        self.everything = False
        while self.events >= 0:
            try:
                data = os.read(self.events, 64 * 1024)
            except BlockingIOError:
                break
            at = 0
            while at + _EVENT.size <= len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size : at + _EVENT.size + size].rstrip(b"\0")
                at += _EVENT.size + size
                lost = lost or bool(mask & IN_Q_OVERFLOW)
                if name:
                    made.setdefault(wd, set()).add(os.fsdecode(name))
        return None if lost else made


_libc = ctypes.CDLL(None, use_errno=True)
_libc.inotify_init1.argtypes = [ctypes.c_int]
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]


def _inotify() -> int:
    """A non-blocking inotify descriptor, or -1 where there is none to be had."""
    return int(_libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
