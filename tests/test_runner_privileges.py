"""A runner with only its container's capabilities (SETUID, SETGID and KILL; no CHOWN, no
DAC_OVERRIDE, no SYS_PTRACE) runs steps as the step user: their outputs files, their
timeouts, their cancels, and the steps a lost launcher leaves behind."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.conftest import StackFactory
from tests.container_privileges import (
    container_runner_prefix,
    container_step_user,
    run_as_runner_container,
)
from tests.stack import step_of, until

REPO = Path(__file__).resolve().parents[1]


async def test_a_step_user_s_steps_pass_outputs_time_out_and_cancel(stack: StackFactory) -> None:
    step_user, uid = container_step_user()
    s = await stack(runners=0, wait=False)
    s.start("runner-0", argv_prefix=container_runner_prefix(), HEDDLE_STEP_USER=step_user)
    await s.wait_ready(1)
    run = await s.wait_run(
        await s.submit(
            {
                "steps": [
                    {"id": "a", "command": "echo uid=$(id -u) >> $HEDDLE_OUTPUTS"},
                    {"id": "b", "command": 'echo "$HEDDLE_OUT_A_UID"', "dependsOn": ["a"]},
                    {"id": "slow", "command": "sleep 30", "timeoutSeconds": 1},
                ]
            }
        ),
        timeout=60,
    )
    a, slow = step_of(run, "a"), step_of(run, "slow")
    assert (a["status"], a["outputs"]) == ("succeeded", {"uid": str(uid)}), a
    assert step_of(run, "b")["stdoutTail"].strip() == str(uid)
    assert (slow["status"], slow["reason"]) == ("failed", "timed out after 1 s"), slow

    pid_file = Path("/tmp") / f"heddle-test-{uuid.uuid4().hex}"
    run_id = await s.submit(
        {"steps": [{"id": "long", "command": f"echo $$ > {pid_file}; exec sleep 60"}]}
    )
    await until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 30, "the pid")
    pid = int(pid_file.read_text())
    assert os.stat(f"/proc/{pid}").st_uid == uid
    status, _ = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert status in (200, 202), status
    cancelled = await s.wait_run(run_id, timeout=30)
    assert (
        cancelled["status"] == "cancelled" and step_of(cancelled, "long")["status"] == "cancelled"
    )
    await until(lambda: not Path(f"/proc/{pid}").exists(), 10, f"step pid {pid} to end")
    pid_file.unlink()


HOLDERS = """
import os, subprocess, sys
from heddle.services.runner_agent.isolation import kill_pipe_holders
uid, gid = int(sys.argv[1]), int(sys.argv[2])
r, w = os.pipe()
as_step = dict(user=uid, group=gid, extra_groups=[]) if os.geteuid() == 0 else {}
apart = subprocess.Popen(["sleep", "30"], pass_fds=(w,), start_new_session=True, **as_step)
beside = subprocess.Popen(["sleep", "30"], pass_fds=(w,))  # in this process's group
kill_pipe_holders(w, uid, gid)


def ended(p):
    try:
        return p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        return None


print(ended(apart), ended(beside))
"""


def test_a_lost_launcher_s_steps_are_found_and_killed_without_sys_ptrace() -> None:
    """The step user's processes that hold a step's pipe are read as the step user: the
    runner's container grants no SYS_PTRACE, without which another user's /proc/<pid>/fd
    cannot be read."""
    _, uid = container_step_user()
    gid = os.getgid() if uid == os.geteuid() else uid
    out = subprocess.run(
        [*container_runner_prefix(), sys.executable, "-c", HOLDERS, str(uid), str(gid)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,
    )
    assert out.stdout.split() == ["-9", "-9"], (out.returncode, out.stderr)


MAKE_OUTPUTS = """
import os, sys
from heddle.services.runner_agent.isolation import resolve_step_user
from heddle.services.runner_agent.outputs_file import OutputsFile
file = OutputsFile(resolve_step_user(sys.argv[1]))
mode = os.stat(os.path.dirname(file.path)).st_mode & 0o7777
print(os.fstat(file.fd).st_uid, oct(mode))
file.close()
print(os.path.exists(file.path))
"""


def test_the_outputs_file_is_the_step_user_s_from_its_start() -> None:
    step_user, uid = container_step_user()
    out = run_as_runner_container(MAKE_OUTPUTS, step_user)
    mode = "0o1733" if step_user != "none" else "0o700"
    assert out.stdout.split() == [str(uid), mode, "False"], (out.returncode, out.stderr)
