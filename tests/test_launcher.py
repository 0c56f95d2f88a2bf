"""The step launcher against real processes: steps run as the step user, the launcher holds
nothing a step could use, and a launcher a step kills or stops costs that step alone."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
from heddle.services.runner_agent.launcher import LauncherError
from heddle.services.runner_agent.process import StepProcess

from tests.launchers import launched_as, step_user
from tests.stack import REPO

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def step(command: str, spawn: dict, timeout: float = 10.0) -> StepProcess:
    return StepProcess(command, ENV, timeout, 0.5, 4096, None, **spawn)


async def test_a_step_runs_as_the_step_user_under_a_launcher_it_cannot_read() -> None:
    user = step_user()
    async with launched_as() as spawn:
        command = (
            "id -u; id -g; grep ^Groups: /proc/self/status | cut -f2; echo $PPID; "
            "grep ^Uid: /proc/$PPID/status | cut -f2-; echo $HOME; "
            "(cat /proc/$PPID/environ >/dev/null 2>&1 && echo readable) || echo unreadable; "
            "ls -l /proc/$$/fd | grep -c socket:"
        )
        result = await step(command, spawn).run()
        uid, gid, groups, parent, launcher_ids, home, environ, fds = result.stdout_tail.split("\n")
        assert (int(uid), int(gid), home) == (user.uid, user.gid, user.home)
        assert int(parent) == spawn["launcher"].pid != os.getpid()
        assert launcher_ids.split() == [str(user.uid)] * 4  # real, effective, saved, fs
        assert environ == "unreadable"  # non-dumpable
        assert fds == "0"  # the launcher's socket stays with it
        if os.geteuid() == 0:
            assert groups.strip() == ""  # no supplementary group of root's


async def test_a_step_that_kills_its_launcher_fails_alone() -> None:
    """Killed before or after it named the step's pid, the launcher's loss fails the step
    (with no exit code, or as not started) and kills it; the next step gets a new one."""
    marker = f"heddle-launcher-test-{os.getpid()}"
    async with launched_as() as spawn:
        launcher = spawn["launcher"]
        for _ in range(5):
            first = launcher.pid
            process = step(f"kill -KILL $PPID; sleep 30; echo {marker}", spawn)
            try:
                result = await process.run()
            except LauncherError:
                pass  # killed before it answered the spawn
            else:
                assert (result.outcome, result.exit_code, result.reason) == (
                    "failed",
                    None,
                    "no exit code",
                )
                assert result.stdout_tail == ""
            assert await gone(marker)
            again = await step("echo next", spawn).run()
            assert (again.outcome, again.stdout_tail) == ("succeeded", "next")
            assert launcher.pid not in (None, first)


async def gone(marker: str, within: float = 10.0) -> bool:
    """No process holds ``marker`` any more, or soon: a SIGKILL takes effect once the
    process is next scheduled, a moment after it was sent (seconds, on a loaded machine)."""
    deadline = time.monotonic() + within
    while running(marker):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def running(marker: str) -> list[int]:
    """The processes whose command line holds ``marker``."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


async def test_a_stopped_launcher_is_replaced_once_an_exit_is_overdue() -> None:
    async with launched_as(answer_within=0.5) as spawn:
        launcher = spawn["launcher"]
        first = launcher.pid
        # Stopped once it answered the spawn (a stop before that is a spawn with no answer,
        # as in the test above): the step's exit is what it cannot report.
        result = await step("sleep 0.2; kill -STOP $PPID; exit 0", spawn).run()
        assert (result.outcome, result.reason) == ("failed", "no exit code")
        with pytest.raises(ChildProcessError):
            os.waitpid(first, os.WNOHANG)  # noqa: ASYNC222 (killed and reaped, not left stopped)
        again = await step("exit 4", spawn).run()
        assert again.exit_code == 4


async def test_bad_requests_leave_the_launcher_serving() -> None:
    async with launched_as() as spawn:
        launcher = spawn["launcher"]
        first = launcher.pid
        with pytest.raises(ValueError, match="null byte"):
            step("echo a\0b", spawn).start()
        big = "x" * 100_000  # a request longer than one socket write
        result = await step(f"v={big}; echo ${{#v}}", spawn).run()
        assert (result.outcome, result.stdout_tail) == ("succeeded", "100000")
        assert launcher.pid == first


async def test_the_launcher_exits_with_its_runner() -> None:
    async with launched_as() as spawn:
        launcher = spawn["launcher"]
        pid = launcher.pid
        assert (await step("true", spawn).run()).outcome == "succeeded"
    assert launcher.pid is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 (reaped)


async def test_the_launcher_has_a_session_of_its_own() -> None:
    """A step caught before its own setsid is in its launcher's group, which is killed
    whole when the launcher is lost: that group must not be the runner's."""
    async with launched_as() as spawn:
        pid = spawn["launcher"].pid
        assert os.getsid(pid) == pid and os.getpgid(pid) != os.getpgrp()


HOLDERS = """
import os, subprocess
from heddle.services.runner_agent.isolation import kill_pipe_holders
r, w = os.pipe()
apart = subprocess.Popen(["sleep", "30"], pass_fds=(w,), start_new_session=True)
beside = subprocess.Popen(["sleep", "30"], pass_fds=(w,))  # in this process's group
bystander = subprocess.Popen(["sleep", "30"])  # same group, holds nothing
kill_pipe_holders(w, os.getuid(), os.getgid())


def ended(p):
    try:
        return p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return None


print(ended(apart), ended(beside), bystander.poll())
bystander.kill()
"""


def test_the_holders_of_a_pipe_are_killed_and_the_runner_s_group_spared() -> None:
    """Run in a session of its own: if it killed its own group, only it would die."""
    out = subprocess.run(
        [sys.executable, "-c", HOLDERS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,
    )
    assert out.stdout.split() == ["-9", "-9", "None"], (out.returncode, out.stderr)
