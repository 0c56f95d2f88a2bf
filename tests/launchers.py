"""A step launcher for tests: as nobody where the tests run as root, else as the tests' own
user (a launcher that is not root keeps its ids)."""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import AsyncIterator
from typing import Any

from heddle.services.runner_agent.isolation import StepUser
from heddle.services.runner_agent.launcher import Launcher


def step_user() -> StepUser:
    entry = pwd.getpwnam("nobody") if os.geteuid() == 0 else pwd.getpwuid(os.geteuid())
    return StepUser(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


@contextlib.asynccontextmanager
async def launched_as(**options: Any) -> AsyncIterator[dict[str, Any]]:
    """``run_as`` and ``launcher`` for StepProcess, the launcher started and closed after."""
    user = step_user()
    launcher = Launcher(user.uid, user.gid, **options)
    launcher.start()
    try:
        yield {"run_as": user, "launcher": launcher}
    finally:
        launcher.close()
