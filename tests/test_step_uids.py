"""Each runner runs its steps as a uid of its own (HEDDLE_STEP_UIDS, runner-N the N-th): the
range and the choice (pure), the lock that keeps a uid one runner's on a machine, and two
runners' concurrent steps, which cannot reach each other, under the containers' capabilities."""

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
from heddle.services.runner_agent.isolation import (
    LOCK_DIR,
    NO_HOME,
    StepUserError,
    hold_step_uid,
    runner_step_user,
    step_uid_for,
    step_uids_problem,
)
from heddle.shared.runtime.settings import Settings, step_uid_range
from heddle.shared.wire.errors import SettingsError

from tests.conftest import StackFactory
from tests.container_privileges import container_runner_prefix
from tests.stack import REPO, step_of, until

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="steps change uid only under root")
DEFAULT = range(60600, 61100)


def own_step_uids() -> str:
    """HEDDLE_STEP_UIDS for a test's runners: ten uids per xdist worker, above the default
    range and below systemd's dynamic users (61184-65519), so no other process has them."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = 61100 + 10 * (int(worker) if worker.isdigit() else 0)
    assert first + 9 < 61184, "more xdist workers than test step uids"
    return f"{first}-{first + 9}"


def shared_dir() -> Path:
    """A directory every step uid may write to (sticky: none removes another's files)."""
    path = Path("/tmp") / f"heddle-test-{uuid.uuid4().hex}"
    path.mkdir()
    path.chmod(0o1777)
    return path


# --- the range and the choice (pure) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "uids"),
    [
        ("60600-61099", range(60600, 61100)),
        ("70000", range(70000, 70001)),
        (" 5 - 9 ", range(5, 10)),
        ("1-65533", range(1, 65534)),
        ("65536-2147483647", range(65536, 2147483648)),
    ],
)
def test_step_uids_are_a_range_of_uids(text: str, uids: range) -> None:
    assert step_uid_range(text) == uids


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "must be FIRST-LAST"),
        ("abc", "must be FIRST-LAST"),
        ("60600-", "must be FIRST-LAST"),
        ("\u0663-\u0665", "must be FIRST-LAST"),  # digits, but not ASCII ones
        ("0-10", "0 is root"),
        ("61099-60600", "FIRST is above LAST"),
        ("1-2147483648", "uids go up to 2147483647"),
        ("60000-70000", "65534 or 65535"),
        ("65535", "65534 or 65535"),
    ],
)
def test_bad_step_uids_are_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        step_uid_range(text)


def test_a_runner_with_bad_step_uids_does_not_start() -> None:
    assert Settings.from_env({}).step_uids == "60600-61099"
    with pytest.raises(SettingsError, match="HEDDLE_STEP_UIDS='61099-60600': FIRST is above"):
        Settings.from_env({"HEDDLE_STEP_UIDS": "61099-60600"})


@pytest.mark.parametrize(
    ("name", "uid"),
    [
        ("runner-0", 60600),
        ("runner-2", 60602),
        ("runner-499", 61099),
        ("blue-runner-7", 60607),  # the chart's, with a namePrefix
        ("gpu-box-12", 60612),
        ("runner-007", 60607),
    ],
)
def test_runner_n_gets_the_n_th_uid(name: str, uid: int) -> None:
    assert step_uid_for(DEFAULT, name) == uid


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "it has no name"),
        ("gateway", "its name 'gateway' ends in no number"),
        ("runner-500", "holds 500, for runner-0 to runner-499"),
        ("runner-12345678901", "has no step uid"),
    ],
)
def test_a_runner_whose_uid_cannot_be_told_is_refused(name: str, why: str) -> None:
    with pytest.raises(StepUserError, match=why):
        step_uid_for(DEFAULT, name)


def user_of(env: dict[str, str], euid: int = 0) -> tuple[str, int, int, str, bool] | None:
    user = runner_step_user(Settings.from_env(env), euid=euid)
    return None if user is None else (user.name, user.uid, user.gid, user.home, user.own)


@pytest.mark.parametrize(
    ("env", "euid", "expected"),
    [
        # Its own uid, from its name; its gid the same number; no passwd entry needed.
        ({"HEDDLE_RUNNER_NAME": "runner-3"}, 0, ("60603", 60603, 60603, NO_HOME, True)),
        ({"POD_NAME": "runner-1"}, 0, ("60601", 60601, 60601, NO_HOME, True)),
        (
            {"POD_NAME": "r-1", "HEDDLE_STEP_UIDS": "70000-70009"},
            0,
            ("70001", 70001, 70001, NO_HOME, True),
        ),
        # Not root: steps run as the runner, whatever is set.
        ({"HEDDLE_RUNNER_NAME": "runner-3"}, 1000, None),
        ({"HEDDLE_STEP_USER": "nobody"}, 1000, None),
        # HEDDLE_STEP_USER set wins, as before; its own only within HEDDLE_STEP_UIDS.
        ({"HEDDLE_STEP_USER": "none", "HEDDLE_RUNNER_NAME": "runner-3"}, 0, None),
        ({"HEDDLE_STEP_USER": "nobody"}, 0, ("nobody", 65534, 65534, "/nonexistent", False)),
        ({"HEDDLE_STEP_USER": "70000"}, 0, ("70000", 70000, 70000, NO_HOME, False)),
        ({"HEDDLE_STEP_USER": "60650"}, 0, ("60650", 60650, 60650, NO_HOME, True)),
    ],
)
def test_the_step_user_a_runner_takes(
    env: dict[str, str], euid: int, expected: tuple[str, int, int, str, bool] | None
) -> None:
    assert user_of(env, euid) == expected


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({}, "cannot tell this runner's step uid"),  # <host>-<pid> is no name to count on
        ({"HEDDLE_RUNNER_NAME": "runner-500"}, "has no step uid"),
        ({"HEDDLE_STEP_USER": "root"}, "is root"),
        ({"HEDDLE_STEP_USER": "no-such-user-here"}, "no such user"),
        ({"HEDDLE_STEP_USER": "4294967295"}, "uids go up to 2147483647"),  # -1: no change
    ],
)
def test_a_runner_as_root_that_cannot_know_its_step_user_is_refused(
    env: dict[str, str], why: str
) -> None:
    with pytest.raises(StepUserError, match=why):
        user_of(env)


@pytest.mark.parametrize(
    ("env", "runners", "why"),
    [
        ({"HEDDLE_STEP_UIDS": "60600-60601"}, 3, "'runner-2' has no step uid"),
        ({"HEDDLE_STEP_USER": "60600"}, 2, "runner-0 and runner-1 would share step uid 60600"),
    ],
)
def test_heddle_up_refuses_runners_that_would_share_a_step_uid(
    env: dict[str, str], runners: int, why: str
) -> None:
    names = [f"runner-{i}" for i in range(runners)]
    assert why in (step_uids_problem(Settings.from_env(env), names, euid=0) or "")
    assert step_uids_problem(Settings.from_env(env), names, euid=1000) is None  # not root


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
