"""Keeping the runner's keys from its steps, and steps from each other (docs/security.md,
"Security").

A step is the one thing Heddle runs that it does not trust. It gets an environment with no
credential in it; a runner that can switch users runs it as a uid of the runner's own
(``HEDDLE_STEP_UIDS``) or as ``HEDDLE_STEP_USER``, so the runner's files and process are out
of its reach, and with a uid of its own so are other runners' steps; and the runner makes
itself non-dumpable, so a step under the same uid cannot read ``/proc/<runner>/environ`` or
attach to it.

A uid of the runner's own is its alone on the machine (a lock, ``hold_step_uid``), so its
step launcher may kill every process of the uid when a step ends (launcher_main.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import logging
import os
import pwd
import re
import signal
import stat
from collections.abc import Mapping
from dataclasses import dataclass

from heddle.services.runner_agent.file_ids import filesystem_ids
from heddle.shared.runtime.settings import MAX_UID, Settings, step_uid_range
from heddle.shared.wire.errors import HeddleError

log = logging.getLogger("heddle.runner")

PR_SET_DUMPABLE = 4
# Heddle's own settings (the NATS user and password among them) and the nats CLI's.
SECRET_PREFIXES = ("HEDDLE_", "NATS_")
URL_WITH_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*@")
# A uid with no passwd entry gets nobody's HOME: one HOME shared by several uids (/tmp) would
# let one runner's step leave dotfiles (.gitconfig, .profile) for another's to obey.
NO_HOME = "/nonexistent"
# One lock file per uid, in a directory only root may write (no step can take a lock first).
LOCK_DIR = "/run/heddle-step-uids"
_held: dict[int, int] = {}  # uid -> the lock's descriptor, held for this process's life


def step_base_env(env: dict[str, str]) -> dict[str, str]:
    """The runner's environment as its steps get it: without Heddle's and NATS's variables
    and without any URL that carries a user or password."""
    return {
        k: v
        for k, v in env.items()
        if not k.startswith(SECRET_PREFIXES) and not URL_WITH_USERINFO.search(v)
    }


def make_undumpable() -> bool:
    """No core dumps and no ptrace or /proc/<pid>/environ for processes of the same uid
    (what ssh-agent does). False where the call is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True, slots=True)
class StepUser:
    """The user steps run as (the step launcher, launcher.py, switches to it)."""

    name: str
    uid: int
    gid: int
    home: str
    own: bool = False  # the uid is this runner's alone: what a step leaves is killed by uid

    def env(self, env: dict[str, str]) -> dict[str, str]:
        return {**env, "HOME": self.home, "USER": self.name, "LOGNAME": self.name}


class StepUserError(HeddleError):
    """The steps' user cannot be known or used: the runner does not start."""


def resolve_step_user(
    wanted: str, euid: int | None = None, own_uids: range = range(0)
) -> StepUser | None:
    """The user steps run as: ``wanted`` when this process may switch to it (root), None
    when steps run as the runner itself (not root, or ``wanted`` is none). A uid needs no
    passwd entry; one in ``own_uids`` is the runner's own, its gid the same number. Raises
    StepUserError when the switch is possible but ``wanted`` does not exist or is root."""
    euid = os.geteuid() if euid is None else euid
    if wanted in ("", "none") or euid != 0:
        return None
    number = wanted.isascii() and wanted.isdigit()
    try:
        entry = pwd.getpwuid(int(wanted)) if number else pwd.getpwnam(wanted)
    except KeyError as exc:
        if not number:
            raise StepUserError(f"HEDDLE_STEP_USER={wanted!r}: no such user") from exc
        entry = None
    uid = entry.pw_uid if entry else int(wanted)
    if uid == 0:
        raise StepUserError(f"HEDDLE_STEP_USER={wanted!r} is root: steps must not be")
    if uid > MAX_UID:
        raise StepUserError(f"HEDDLE_STEP_USER={wanted!r}: uids go up to {MAX_UID}")
    own = uid in own_uids
    if entry is None:
        return StepUser(str(uid), uid, uid, NO_HOME, own)
    return StepUser(entry.pw_name, uid, uid if own else entry.pw_gid, entry.pw_dir, own)


def step_uid_for(uids: range, name: str) -> int:
    """The step uid of the runner named ``name`` (its HEDDLE_RUNNER_NAME or POD_NAME): the
    uid at the number its name ends in (runner-N: the first uid + N)."""
    digits = re.search(r"[0-9]+$", name)
    shown = f"HEDDLE_STEP_UIDS={uids[0]}-{uids[-1]}"
    if digits is None:
        why = f"its name {name!r} ends in no number" if name else "it has no name"
        raise StepUserError(
            f"cannot tell this runner's step uid: {shown} gives runner-N the uid FIRST+N, and "
            f"{why}; name it (HEDDLE_RUNNER_NAME) runner-N, or set HEDDLE_STEP_USER"
        )
    if len(digits[0]) > 9 or int(digits[0]) >= len(uids):
        raise StepUserError(
            f"runner {name!r} has no step uid: {shown} holds {len(uids)}, for runner-0 to "
            f"runner-{len(uids) - 1}"
        )
    return uids[int(digits[0])]


def runner_step_user(settings: Settings, euid: int | None = None) -> StepUser | None:
    """The user this runner's steps run as: HEDDLE_STEP_USER where set (its own if in
    HEDDLE_STEP_UIDS), else the uid of HEDDLE_STEP_UIDS its name gives it (step_uid_for);
    None where steps run as the runner (not root, or HEDDLE_STEP_USER=none)."""
    euid = os.geteuid() if euid is None else euid
    uids = step_uid_range(settings.step_uids)
    if settings.step_user or euid != 0:
        return resolve_step_user(settings.step_user, euid, uids)
    uid = step_uid_for(uids, settings.runner_name or settings.pod_name)
    return resolve_step_user(str(uid), euid, uids)


def take_step_user(settings: Settings) -> StepUser | None:
    """runner_step_user, its uid held by this process alone where it is its own."""
    user = runner_step_user(settings)
    if user is not None and user.own:
        hold_step_uid(user.uid)
    elif user is not None:
        log.warning(
            "steps run as %s (uid %d), outside HEDDLE_STEP_UIDS: they may share it with other "
            "runners' steps, and what one leaves running is killed by its process group alone",
            user.name,
            user.uid,
        )
    return user


def hold_step_uid(uid: int, keep: bool = True, directory: str = LOCK_DIR) -> None:
    """``uid`` held by this process for its life (``keep``; else only found free): the
    launcher kills every process of it after each step, so it must be no other runner's.
    Raises StepUserError where another process holds it, or the lock cannot be made."""
    if uid in _held:
        return
    try:
        os.makedirs(directory, 0o755, exist_ok=True)
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o22:
            raise OSError(f"{directory} is not a directory of uid {os.geteuid()} alone")
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(os.path.join(directory, str(uid)), flags, 0o600)
    except OSError as exc:
        raise StepUserError(f"cannot lock step uid {uid} for this runner alone: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise StepUserError(
            f"step uid {uid} is another runner's on this machine (it holds "
            f"{directory}/{uid}): give each runner its own (HEDDLE_STEP_UIDS, its name's number)"
        ) from exc
    if keep:
        _held[uid] = fd
    else:
        os.close(fd)


def step_uids_problem(
    settings: Settings,
    runners: list[str],
    euid: int | None = None,
    step_uids: Mapping[str, str] | None = None,
) -> str | None:
    """Why ``runners`` (named so, on this machine) cannot each have a step uid of its own,
    or None: what `heddle up` checks before it starts any. ``step_uids``: the
    HEDDLE_STEP_UIDS of the runners given their own (a named pool's)."""
    owners: dict[int, str] = {}
    own = step_uids or {}
    try:
        for name in runners:
            mine = dataclasses.replace(settings, runner_name=name)
            if name in own:
                mine = dataclasses.replace(mine, step_uids=own[name])
            user = runner_step_user(mine, euid)
            if user is not None and user.own:
                if user.uid in owners:
                    return f"{owners[user.uid]} and {name} would share step uid {user.uid}"
                owners[user.uid] = name
        for uid in owners:
            hold_step_uid(uid, keep=False)
    except StepUserError as exc:
        return str(exc)
    return None


# ---- a lost launcher's steps (services/runner_agent/launcher.py) ----


def kill_pipe_holders(pipe_end: int, uid: int, gid: int) -> None:
    """Kill the process group of every other process that holds this pipe open: a step its
    launcher spawned and never named. A holder in this process's own group (a fork of the
    runner not yet exec'd, say) is killed alone: the group is the runner's."""
    target = f"pipe:[{os.fstat(pipe_end).st_ino}]"
    me, my_group = os.getpid(), os.getpgrp()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        with contextlib.suppress(OSError):
            if target in _descriptors(entry, uid, gid):
                pid = int(entry)
                if (group := os.getpgid(pid)) == my_group:
                    os.kill(pid, signal.SIGKILL)
                else:
                    os.killpg(group, signal.SIGKILL)


def _descriptors(pid: str, uid: int, gid: int) -> set[str]:
    """What a process's descriptors lead to, read as the runner or, for a step, as the step
    user: a runner without CAP_SYS_PTRACE cannot read another user's."""
    try:
        return _links(pid)
    except PermissionError:
        with filesystem_ids(uid, gid):
            return _links(pid)


def _links(pid: str) -> set[str]:
    fds, links = f"/proc/{pid}/fd", set()
    for fd in os.listdir(fds):
        with contextlib.suppress(FileNotFoundError):  # closed since listed
            links.add(os.readlink(f"{fds}/{fd}"))
    return links
