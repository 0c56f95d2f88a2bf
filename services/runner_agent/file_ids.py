"""Touching files and ``/proc`` entries as the step user, with no capability but the two the
runner holds anyway to start its step launcher (SETUID and SETGID).

Linux checks a file's creation and access, and reads of another process's ``/proc/<pid>/fd``,
against the calling thread's filesystem ids, which ``setfsuid(2)`` and ``setfsgid(2)`` change
alone: a file made under them is the step user's from its start (no ``fchown``, which needs
CAP_CHOWN), and a step's descriptors can be read as their owner (no CAP_SYS_PTRACE). The ids
are the calling thread's, so nothing else in the process sees the change.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
from collections.abc import Iterator

_libc = ctypes.CDLL(None, use_errno=True)
for _call in (_libc.setfsuid, _libc.setfsgid):
    _call.argtypes = [ctypes.c_uint]
    _call.restype = ctypes.c_int
# An id no user has: the calls answer the current one and change nothing.
_ASK = 0xFFFFFFFF


def _filesystem_ids() -> tuple[int, int]:
    return _libc.setfsuid(_ASK), _libc.setfsgid(_ASK)


@contextlib.contextmanager
def filesystem_ids(uid: int, gid: int) -> Iterator[None]:
    """This thread's file access as ``uid``/``gid`` inside the block. Raises PermissionError
    where the switch is not allowed (the calls fail silently, so the result is read back)."""
    old_uid, old_gid = _filesystem_ids()
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    try:
        if _filesystem_ids() != (uid, gid):
            raise PermissionError(errno.EPERM, f"cannot act on files as uid {uid} gid {gid}")
        yield
    finally:
        _libc.setfsuid(old_uid)
        _libc.setfsgid(old_gid)
