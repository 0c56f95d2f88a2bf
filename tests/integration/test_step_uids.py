"""Each runner runs its steps as a uid of its own (HEDDLE_STEP_UIDS, runner-N the N-th): the
lock that keeps a uid one runner's on a machine, and two runners' concurrent steps, which
cannot reach each other, under the containers' capabilities. The range and the choice,
without I/O: tests/unit/runner_agent/test_step_uids.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from heddle.services.runner_agent.isolation import LOCK_DIR, StepUserError, hold_step_uid
from heddle.shared.runtime.settings import step_uid_range

from tests.support.container_privileges import container_runner_prefix
from tests.support.stack import REPO, StackFactory, step_of, until
from tests.support.step_uids import AS_ROOT, own_step_uids, shared_dir

# --- one runner per uid on a machine ----------------------------------------------------------

HOLD = """
import sys, time
from heddle.services.runner_agent.isolation import hold_step_uid
hold_step_uid(int(sys.argv[1]), directory=sys.argv[2])
print("held", flush=True)
time.sleep(60)
"""


@contextlib.contextmanager
def held_elsewhere(uid: int, directory: str) -> Iterator[None]:
    """``uid`` held by another process (a runner, as far as the lock tells) meanwhile."""
    argv = [sys.executable, "-c", HOLD, str(uid), directory]
    with subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            yield
        finally:
            holder.kill()


def test_a_step_uid_another_process_holds_is_refused(tmp_path: Path) -> None:
    """The lock is a file per uid, in a directory no one else may write."""
    with held_elsewhere(61234, str(tmp_path)):
        with pytest.raises(StepUserError, match="step uid 61234 is another runner's"):
            hold_step_uid(61234, keep=False, directory=str(tmp_path))
        hold_step_uid(61235, keep=False, directory=str(tmp_path))  # another uid is free
    hold_step_uid(61234, keep=False, directory=str(tmp_path))  # free once its holder is gone
    tmp_path.chmod(0o777)
    with pytest.raises(StepUserError, match="alone"):
        hold_step_uid(61234, keep=False, directory=str(tmp_path))


@AS_ROOT
def test_a_second_runner_with_the_same_step_uid_does_not_start() -> None:
    """Each kills every process of its uid after a step: the second would kill the first's."""
    uid = int(own_step_uids().split("-")[0]) + 9
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HEDDLE_")},
        "HEDDLE_RUNNER_NAME": "runner-0",
        "HEDDLE_STEP_UIDS": str(uid),
        "HEDDLE_NATS_URL": "nats://127.0.0.1:1",
        "PYTHONPATH": str(REPO),
    }
    argv = [*container_runner_prefix(), sys.executable, "-m", "heddle.services.cli", "runner"]
    with held_elsewhere(uid, LOCK_DIR):
        out = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out
    assert f"step uid {uid} is another runner's on this machine" in out.stderr, out.stderr


# --- two runners' concurrent steps -------------------------------------------------------------

# Y's step names its shell and outputs file, then runs until X's step is done with them.
Y = """
echo "$HEDDLE_OUTPUTS" > {d}/y.outputs
echo $$ > {d}/y.pid
i=0; while [ ! -e {d}/x.done ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
echo "uid=$(id -u)" >> "$HEDDLE_OUTPUTS"
"""
# X's step, meanwhile, on the other runner: Y's environment, a signal, Y's outputs file.
X = """
p=$(cat {d}/y.pid); o=$(cat {d}/y.outputs)
if cat /proc/$p/environ > {d}/x.environ 2>&1; then r=read; else r=denied; fi
if kill -0 $p 2> {d}/x.kill; then k=sent; else k=denied; fi
if (echo hijacked=1 >> "$o") 2> /dev/null; then a=appended; else a=denied; fi
printf 'environ=%s\\nsignal=%s\\nappend=%s\\nuid=%s\\n' $r $k $a $(id -u) >> "$HEDDLE_OUTPUTS"
touch {d}/x.done
"""


@AS_ROOT
async def test_two_runners_concurrent_steps_cannot_reach_each_other(stack: StackFactory) -> None:
    uids = step_uid_range(own_step_uids())
    s = await stack(runners=0, wait=False)
    for name in ("runner-0", "runner-1"):
        s.start(
            name,
            argv_prefix=container_runner_prefix(),
            HEDDLE_STEP_USER="",
            HEDDLE_STEP_UIDS=own_step_uids(),
        )
    await s.wait_ready(2)
    d = shared_dir()
    try:
        secret = f"y-secret-{uuid.uuid4().hex}"
        y_step = {"id": "y", "command": Y.format(d=d), "env": {"Y_SECRET": secret}}
        y_id = await s.submit({"steps": [y_step]})
        await until(lambda: (d / "y.pid").exists() and (d / "y.pid").read_text(), 30, "Y's step")
        y_pid = int((d / "y.pid").read_text())
        x_id = await s.submit({"steps": [{"id": "x", "command": X.format(d=d)}]})
        x, y = step_of(await s.wait_run(x_id, 60), "x"), step_of(await s.wait_run(y_id, 60), "y")
        assert x["status"] == "succeeded" and y["status"] == "succeeded", (x, y)
        x_uid, y_uid = int(x["outputs"]["uid"]), int(y["outputs"]["uid"])
        # Each runner its own uid of the range; Y's shell was Y's uid's.
        assert x_uid != y_uid and {x_uid, y_uid} == {uids[0], uids[1]}, (x_uid, y_uid)
        assert x["outputs"] == {
            "environ": "denied",
            "signal": "denied",
            "append": "denied",
            "uid": str(x_uid),
        }, (x["outputs"], (d / "x.environ").read_text(errors="replace"))
        assert secret not in (d / "x.environ").read_text(errors="replace")
        assert "not permitted" in (d / "x.kill").read_text(), (d / "x.kill").read_text()  # EPERM
        assert y["outputs"] == {"uid": str(y_uid)}, y  # nothing of X's in Y's outputs
        assert not Path(f"/proc/{y_pid}").exists()
    finally:
        shutil.rmtree(d, ignore_errors=True)
