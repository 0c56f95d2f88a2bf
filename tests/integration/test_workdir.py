"""Each attempt's working directory (services/runner_agent/workdir.py): fresh, private to the
step, and gone with everything in it before the runner's next step, however the attempt
ended and whatever the step did to keep it; and what a uid of the runner's own left at the
top of /tmp, /var/tmp and /dev/shm gone too (leftovers.py). Real processes throughout: the
removal as the containers' runner (no DAC_OVERRIDE, no CHOWN), the steps under launchers,
whole stacks whose next step (another run's) looks for what the last one left."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from heddle.services.runner_agent.isolation import NO_HOME, StepUser
from heddle.services.runner_agent.leftovers import TempSweep
from heddle.services.runner_agent.process import StepProcess
from heddle.services.runner_agent.workdir import Workdir, workdir_env

from tests.support.container_privileges import (
    container_runner_prefix,
    container_step_user,
    run_as_runner_container,
)
from tests.support.launchers import launched_as
from tests.support.stack import REPO, Stack, StackFactory, step_of, until
from tests.support.step_uids import AS_ROOT, own_step_uids, shared_dir

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/home/runner"}
# What a hostile step leaves in its working directory ({o}: a directory of the runner's).
HOSTILE = """
echo s > kept; echo s > "$TMPDIR/made-through-tmpdir"; mkfifo fifo
ln -s {o}/secret link-to-file; ln -s {o} link-to-dir; ln -s / link-to-root
mkdir -p locked/inner && echo s > locked/inner/f && chmod 000 locked
mkdir -p read-only/x && echo s > read-only/x/f && chmod 500 read-only/x read-only
mkdir sticky && echo s > sticky/f && chmod 1777 sticky
mkdir deep && (cd deep && mkdir -p $(printf 'd/%.0s' $(seq 1500)) && chmod 000 d/d/d)
echo s > "$(dirname "$PWD")/beside"; echo s > "$(dirname "$(dirname "$PWD")")/base" 2>/dev/null
chmod 000 .
"""


def discard(d: Path) -> None:
    """A test's directory gone, whatever a step (or a broken removal) left in it."""
    subprocess.run(["chmod", "-R", "u+rwx", str(d)], check=False)
    subprocess.run(["rm", "-rf", str(d)], check=True)


def outside_of_the_runner(d: Path) -> Path:
    """A directory of the runner's with a file in it, which no step may cost it."""
    (d / "runner").mkdir()
    (d / "runner" / "secret").write_text("keep\n")
    return d / "runner"


def intact(outside: Path) -> bool:
    secret = outside / "secret"
    return (secret.read_text(), secret.stat().st_mode, os.listdir(outside)) == (
        "keep\n", 0o100644, ["secret"],
    )  # fmt: skip


# --- removal, as the containers' runner --------------------------------------------------------

REMOVE = """
import os, subprocess, sys
from heddle.services.runner_agent.leftovers import remove
parent, step = sys.argv[1], sys.argv[2]
os.mkdir(os.path.join(parent, "victim"), 0o700)
made = subprocess.run(["/bin/sh", "-c", step], cwd=os.path.join(parent, "victim"),
                      env={"PATH": os.environ["PATH"], "TMPDIR": "."}, capture_output=True)
fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
print(made.returncode, remove(fd, "victim"), sorted(os.listdir(fd)), made.stderr)
"""


def test_a_hostile_tree_is_removed_without_reaching_outside_it() -> None:
    """Links removed, not followed; 000 and 500 directories opened up by their owner (no
    DAC_OVERRIDE to pass them); a tree deeper than rmtree's recursion flattened."""
    d = shared_dir()
    try:
        outside = outside_of_the_runner(d)
        (d / "parent").mkdir()
        out = run_as_runner_container(REMOVE, str(d / "parent"), HOSTILE.format(o=outside))
        assert out.stdout.split(" ", 3)[:3] == ["0", "True", "['beside']"], (out.stdout, out.stderr)
        assert intact(outside)
    finally:
        discard(d)


def test_the_temp_sweep_is_never_root_s_nor_another_uid_s() -> None:
    with pytest.raises(ValueError, match="uid 0"):
        TempSweep(0, [])
    with pytest.raises(ValueError):
        TempSweep(os.getuid() + 1, [])


SWEEP = """
import os, sys
from heddle.services.runner_agent.leftovers import TempSweep
first, second, uid = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.setgroups([])  # the uid's alone, as the launcher (the interpreter is read as root)
os.setresgid(uid, uid, uid)
os.setresuid(uid, uid, uid)
open(os.path.join(first, "before-the-launcher"), "w").close()  # a lost launcher's step's
sweep = TempSweep(os.getuid(), [first, second])
sweep.sweep()
print(sorted(os.listdir(first)), end=" ")
open(os.path.join(first, "file"), "w").close()
os.makedirs(os.path.join(first, "dir", "locked", "in"))
os.chmod(os.path.join(first, "dir", "locked"), 0)
os.symlink("/etc/passwd", os.path.join(second, "link"))
os.mkfifo(os.path.join(second, "fifo"))
sweep.sweep()
print(sorted(os.listdir(first)), sorted(os.listdir(second)))
"""


@AS_ROOT
def test_the_temp_sweep_removes_the_uid_s_own_entries_alone() -> None:
    """Found by the first sweep's look at everything, then by the names inotify gives."""
    uid = int(own_step_uids().split("-")[0]) + 8
    d = shared_dir()
    try:
        for name in ("first", "second"):
            (d / name).mkdir()
            (d / name).chmod(0o1777)
        (d / "first" / "root-s").write_text("keep\n")
        (d / "second" / "another-uid-s").write_text("keep\n")
        os.chown(d / "second" / "another-uid-s", uid + 1, uid + 1)
        argv = [sys.executable, "-c", SWEEP, str(d / "first"), str(d / "second"), str(uid)]
        out = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=30,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert out.stdout.split("\n")[0] == "['root-s'] ['root-s'] ['another-uid-s']", out
    finally:
        discard(d)


PLACE = """
import sys
from heddle.services.runner_agent import workdir
workdir.MEMORY_MIN_BYTES = int(sys.argv[1])
print(workdir.Workdir(None).path)
"""


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")
@pytest.mark.parametrize(("least", "where"), [(1, "/dev/shm"), (1 << 60, tempfile.gettempdir())])
def test_the_directories_are_in_memory_where_it_has_room(least: int, where: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PLACE, str(least)], cwd=REPO, capture_output=True, text=True
    )
    assert out.stdout.startswith(f"{where}/heddle-work-"), out


def test_the_step_s_environment_names_its_directory() -> None:
    homeless = StepUser("60600", 60600, 60600, NO_HOME, True)
    at_home = StepUser("me", os.geteuid(), os.getegid(), str(Path.home()))
    base = {"HOME": "/home/runner", "TMPDIR": "/tmp", "PWD": "/srv"}
    mine = {"HEDDLE_WORKDIR": "/w", "TMPDIR": "/w", "PWD": "/w"}
    assert workdir_env(base, "/w", None) == {**base, **mine}  # the runner's own HOME
    assert workdir_env(base, "/w", homeless) == {**base, **mine, "HOME": "/w"}
    assert workdir_env(base, "/w", at_home) == {**base, **mine}


# --- one runner's steps, one after another ---------------------------------------------------

PROBE = (
    'pwd; echo "$HEDDLE_WORKDIR"; echo "$TMPDIR"; echo "$HOME"; stat -c "%a %u" .; ls -A | wc -l'
)


@pytest.fixture(params=["by the runner", "by a launcher"])
async def spawn(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any]]:
    if request.param == "by the runner":
        yield {}
        return
    async with launched_as() as options:
        yield options


async def test_each_attempt_starts_in_a_fresh_private_directory_that_goes(
    spawn: dict[str, Any],
) -> None:
    d = shared_dir()
    try:
        outside = outside_of_the_runner(d)
        paths = set()
        for _ in range(2):
            workdir = Workdir(spawn.get("run_as"))
            command = PROBE + HOSTILE.format(o=outside)
            result = await StepProcess(command, ENV, 30, 0.5, 4096, cwd=workdir.path, **spawn).run()
            pwd, named, tmpdir, home, mode, entries = result.stdout_tail.split("\n")
            uid = spawn["run_as"].uid if spawn else os.geteuid()
            assert pwd == named == tmpdir == workdir.path not in paths, result
            assert (mode, entries) == (f"700 {uid}", "0"), result
            if spawn and spawn["run_as"].home == NO_HOME:  # nobody has no home of its own
                assert home == workdir.path
            assert await workdir.remove(spawn.get("launcher"))
            assert not os.path.lexists(workdir.holder)
            paths.add(workdir.path)
        assert intact(outside)
    finally:
        discard(d)


# --- whole stacks: the next step, another run's, looks for what the last one left -----------

MODES = [
    pytest.param({"HEDDLE_STEP_USER": "none"}, id="as the runner"),
    pytest.param({"HEDDLE_STEP_USER": container_step_user()[0]}, id="as nobody", marks=AS_ROOT),
    pytest.param(
        {"HEDDLE_STEP_USER": "", "HEDDLE_STEP_UIDS": own_step_uids()},
        id="as a uid of its own",
        marks=AS_ROOT,
    ),
]


@dataclass
class OneRunner:
    """A stack with one runner, the containers' capabilities, its steps run as ``env`` says."""

    stack: Stack
    env: dict[str, str]

    async def run(self, step: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        run = await self.stack.wait_run(await self.stack.submit({"steps": [step]}), timeout)
        return step_of(run, step["id"])


@pytest.fixture(params=MODES)
async def runner(request: pytest.FixtureRequest, stack: StackFactory) -> OneRunner:
    s = await stack(runners=0, wait=False)
    s.start("runner-0", argv_prefix=container_runner_prefix(), **request.param)
    await s.wait_ready(1)
    return OneRunner(s, request.param)


def leave(d: Path, tag: str) -> str:
    """Files in the step's cwd and $TMPDIR, at the top of /tmp and /dev/shm and beside its
    outputs file (under a name a later step knows), then the path of its directory written
    to ``d``."""
    return (
        'echo s > kept; echo s > "$TMPDIR/t"; mkdir sub; '
        f'echo s > "$(dirname "$HEDDLE_OUTPUTS")/{tag}-$HEDDLE_STEP_ID" || true; '
        f": > /tmp/{tag}-$HEDDLE_STEP_ID; mkdir -p /dev/shm/{tag}-$HEDDLE_STEP_ID/x; "
        f'echo "$HEDDLE_WORKDIR" > {d}/$HEDDLE_STEP_ID-$HEDDLE_ATTEMPT.path; '
    )


def look(d: Path, tag: str) -> str:
    """What is left of the steps before (their directories, the directories around them, their
    files in /tmp and /dev/shm), counted by the next step, and what its own cwd holds."""
    return (
        f"n=0; for f in {d}/*.path; do p=$(cat $f); "
        '[ -e "$p" ] || [ -e "$(dirname "$p")" ] && n=$((n+1)) && echo "$p" >&2; done; '
        f"for p in /tmp/{tag}-* /dev/shm/{tag}-*; do [ -e $p ] && n=$((n+1)) && echo $p >&2; done; "
        # Not listable: looked for by the names the steps before used.
        f'o=$(dirname "$HEDDLE_OUTPUTS"); for s in {" ".join(STEP_IDS)}; do '
        f'[ -e "$o/{tag}-$s" ] && n=$((n+1)) && echo "$o/{tag}-$s" >&2; done; '
        'echo "left=$n" >> $HEDDLE_OUTPUTS; e=unreadable; ls -A >/dev/null && e=$(ls -A | wc -l); '
        'echo "entries=$e" >> $HEDDLE_OUTPUTS'
    )


STEP_IDS = ("ok", "fails", "slow", "retried", "hostile", "held", "lost")


def all_gone(d: Path) -> list[str]:
    """The directories the steps recorded, none of them, nor their holders, left."""
    paths = [Path(f.read_text().strip()) for f in d.glob("*.path")]
    assert all(p.is_absolute() for p in paths), paths
    return [str(p) for p in paths if os.path.lexists(p) or os.path.lexists(p.parent)]


def retried(d: Path, tag: str) -> str:
    """Fails its first attempt; the second sees its own cwd and the first's."""
    return (
        'if [ "$HEDDLE_ATTEMPT" = 2 ]; then echo "entries=$(ls -A | wc -l)" >> $HEDDLE_OUTPUTS; '
        f'[ -e "$(cat {d}/retried-1.path)" ] || echo first=gone >> $HEDDLE_OUTPUTS; fi; '
        + leave(d, tag)
        + '[ "$HEDDLE_ATTEMPT" = 2 ]'
    )


def clear(tag: str, beside_outputs: bool = True) -> None:
    """The tests' own files at the top of /tmp and /dev/shm (a step not of its own uid's),
    and with ``beside_outputs`` those beside the outputs files (a step as the runner's user)."""
    found = [*Path("/tmp").glob(f"{tag}-*"), *Path("/dev/shm").glob(f"{tag}-*")]
    if beside_outputs:
        found += [p for top in ("/tmp", "/dev/shm") for p in Path(top).glob(f"*/{tag}-*")]
    for path in found:
        discard(path)


async def test_what_each_attempt_leaves_is_gone_before_the_next_step(runner: OneRunner) -> None:
    """After a success, a failure, a timeout, a retry, a cancel, (with a launcher) the
    launcher's loss, and a hostile step that would make the runner remove what is not its
    or stop cleaning; a retried attempt starts in a fresh, empty directory too."""
    d, tag = shared_dir(), f"heddle-wd-{uuid.uuid4().hex}"
    launcher, own = runner.env["HEDDLE_STEP_USER"] != "none", "HEDDLE_STEP_UIDS" in runner.env
    try:
        outside = outside_of_the_runner(d)
        steps = [
            {"id": "ok", "command": leave(d, tag) + "true"},
            {"id": "fails", "command": leave(d, tag) + "exit 3"},
            {"id": "slow", "command": leave(d, tag) + "sleep 30", "timeoutSeconds": 1},
            {"id": "retried", "command": retried(d, tag), "retries": 1},
            {"id": "hostile", "command": leave(d, tag) + HOSTILE.format(o=outside)},
        ]
        run = await runner.stack.wait_run(await runner.stack.submit({"steps": steps}), 60)
        statuses = [step_of(run, s["id"])["status"] for s in steps]
        assert statuses == ["succeeded", "failed", "failed", "succeeded", "succeeded"], run
        assert step_of(run, "retried")["outputs"] == {"entries": "0", "first": "gone"}, run
        held_id = await runner.stack.submit(
            {"steps": [{"id": "held", "command": leave(d, tag) + "sleep 30"}]}
        )
        await until(lambda: (d / "held-1.path").exists(), 30, "the held step")
        status, _ = await runner.stack.request("POST", f"/api/runs/{held_id}/cancel")
        assert status in (200, 202)
        assert (await runner.stack.wait_run(held_id))["status"] == "cancelled"
        if launcher:  # the step kills it
            lost = await runner.run(
                {"id": "lost", "command": leave(d, tag) + "kill -9 $PPID; sleep 30"}
            )
            assert lost["status"] == "failed", lost
        if not own:  # only a uid of the runner's own has what it left there removed
            clear(tag, beside_outputs=not launcher)
        looked = await runner.run({"id": "look", "command": look(d, tag)})
        assert looked["outputs"] == {"left": "0", "entries": "0"}, looked
        assert len(list(d.glob("*.path"))) == (8 if launcher else 7)
        assert all_gone(d) == [] and intact(outside)
        base = Path((d / "hostile-1.path").read_text().strip()).parent.parent
        assert base.name.startswith("heddle-work-")
        if launcher:  # else the step is the runner's own user, which may write there
            assert not os.path.lexists(base / "base")
    finally:
        discard(d)
        clear(tag)
