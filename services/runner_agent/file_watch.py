"""Being told that a file was written, without polling: Linux's inotify, which Python's
standard library lacks, through ctypes.

One inotify instance per event loop (per runner process: it has one loop), read by the loop
when the kernel queues an event, with one ``IN_MODIFY`` watch (a write, a truncation, an
``fallocate``) per directory, added at its first file and kept: a file costs no system call
and a file nobody writes never wakes the loop. A watch per file, added and removed for each,
cost every step measurably (docs/performance.md). Any write in a directory calls every
callback of its files, so a file renamed within it is still seen.

Adding a watch needs read permission on the directory. It counts against the limits of the
user that made the instance (``fs.inotify.max_user_watches``).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import struct
from collections.abc import Callable

log = logging.getLogger("heddle.runner")

IN_MODIFY = 0x00000002
IN_Q_OVERFLOW = 0x00004000  # events were lost (wd -1): every watched file is looked at
IN_IGNORED = 0x00008000  # the watch is gone: removed, or its file's filesystem unmounted
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (0: a watch on a file has no name)
_READ = 4096 * _EVENT.size  # events read at a time

_libc = ctypes.CDLL(None, use_errno=True)
_libc.inotify_init1.argtypes = [ctypes.c_int]
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
for _call in (_libc.inotify_init1, _libc.inotify_add_watch, _libc.inotify_rm_watch):
    _call.restype = ctypes.c_int


def _checked(result: int) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


class Watch:
    """One file's watch: ``stop`` it once the file is no longer of interest (no system call:
    its directory stays watched)."""

    __slots__ = ("_owner", "name", "wd")

    def __init__(self, owner: FileWatch, wd: int, name: str) -> None:
        self._owner = owner
        self.wd = wd
        self.name = name

    def stop(self) -> None:
        self._owner.remove(self.wd, self.name)


class FileWatch:
    """An inotify instance read by ``loop``; ``add`` a watch per file."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.fd = _checked(_libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        self._directories: dict[str, int] = {}  # path -> wd, watched once
        self._files: dict[int, dict[str, Callable[[], None]]] = {}  # wd -> name -> callback
        loop.add_reader(self.fd, self._read)

    def add(self, path: str, changed: Callable[[], None]) -> Watch:
        """Call ``changed()`` from the loop after a file in the directory of ``path`` is
        written (once for the writes queued since the last read): any, so that a file renamed
        within it is still seen. The directory is watched at its first file, for good.
        Raises OSError (no read permission on the directory, too many watches)."""
        directory, name = os.path.split(path)
        wd = self._directories.get(directory)
        if wd is None:
            wd = _checked(_libc.inotify_add_watch(self.fd, os.fsencode(directory), IN_MODIFY))
            self._directories[directory] = wd
        self._files.setdefault(wd, {})[name] = changed
        return Watch(self, wd, name)

    def remove(self, wd: int, name: str) -> None:
        self._files.get(wd, {}).pop(name, None)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        if not self.loop.is_closed():
            self.loop.remove_reader(fd)
        os.close(fd)
        self._files.clear()
        self._directories.clear()

    def _read(self) -> None:
        """Every event queued, each watched file's callback called once for them."""
        due: dict[int, Callable[[], None]] = {}
        while True:
            try:
                data = os.read(self.fd, _READ)
            except BlockingIOError:
                break
            for wd, mask in _events(data):
                if mask & IN_Q_OVERFLOW:
                    wds: list[int] = list(self._files)
                elif mask & IN_IGNORED:  # the directory is gone, and its watch with it
                    self._forget(wd)
                    continue
                else:
                    wds = [wd]
                for changed in (cb for w in wds for cb in self._files.get(w, {}).values()):
                    due[id(changed)] = changed
            if len(data) <= _READ - _EVENT.size:  # room for more: none was left
                break
        for changed in due.values():
            try:
                changed()
            except Exception:  # one file's callback does not stop the others'
                log.exception("a file watch's callback failed")

    def _forget(self, wd: int) -> None:
        self._files.pop(wd, None)
        for directory, watched in list(self._directories.items()):
            if watched == wd:
                del self._directories[directory]


def _events(data: bytes) -> list[tuple[int, int]]:
    """Each event's watch and mask."""
    events, at = [], 0
    while at + _EVENT.size <= len(data):
        wd, mask, _cookie, length = _EVENT.unpack_from(data, at)
        events.append((wd, mask))
        at += _EVENT.size + length
    return events


_watches: dict[asyncio.AbstractEventLoop, FileWatch] = {}
_unavailable = False  # told in the log already


def running() -> FileWatch | None:
    """The running loop's instance, made at its first use; None (with a warning) where
    inotify cannot be had (``fs.inotify.max_user_instances`` reached), tried again next time."""
    global _unavailable
    loop = asyncio.get_running_loop()
    watch = _watches.get(loop)
    if watch is not None:
        return watch
    for old in [other for other in _watches if other.is_closed()]:  # tests run loop after loop
        _watches.pop(old).close()
    try:
        watch = _watches[loop] = FileWatch(loop)
    except OSError as exc:
        if not _unavailable:
            log.warning("no inotify (%s): files are not watched while they are written", exc)
        _unavailable = True
        return None
    _unavailable = False
    return watch
