"""Keeping the runner's keys from its steps (docs/architecture.md, "Security").

A step is the one thing Heddle runs that it does not trust. It gets an environment with no
credential in it; a runner that can switch users runs it as ``HEDDLE_STEP_USER``, so the
runner's files and process are out of its reach; and the runner makes itself non-dumpable,
so a step under the same uid cannot read ``/proc/<runner>/environ`` or attach to it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pwd
import re
from dataclasses import dataclass

from shared.errors import HeddleError

log = logging.getLogger("heddle.runner")

PR_SET_DUMPABLE = 4
# Heddle's own settings (the NATS user and password among them) and the nats CLI's.
SECRET_PREFIXES = ("HEDDLE_", "NATS_")
URL_WITH_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*@")


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
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True, slots=True)
class StepUser:
    """The user steps run as (the step launcher, launcher.py, switches to it)."""

    name: str
    uid: int
    gid: int
    home: str

    def env(self, env: dict[str, str]) -> dict[str, str]:
        return {**env, "HOME": self.home, "USER": self.name, "LOGNAME": self.name}


class StepUserError(HeddleError):
    """HEDDLE_STEP_USER cannot be used: the runner does not start."""


def resolve_step_user(wanted: str, euid: int | None = None) -> StepUser | None:
    """The user steps run as: ``wanted`` when this process may switch to it (root), None
    when steps run as the runner itself (not root, or ``wanted`` is none). Raises
    StepUserError when the switch is possible but ``wanted`` does not exist or is root."""
    euid = os.geteuid() if euid is None else euid
    if wanted in ("", "none") or euid != 0:
        return None
    try:
        entry = pwd.getpwuid(int(wanted)) if wanted.isdigit() else pwd.getpwnam(wanted)
    except KeyError as exc:
        raise StepUserError(f"HEDDLE_STEP_USER={wanted!r}: no such user") from exc
    if entry.pw_uid == 0:
        raise StepUserError(f"HEDDLE_STEP_USER={wanted!r} is root: steps must not be")
    return StepUser(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
