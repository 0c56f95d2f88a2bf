"""Nothing a step starts outlives it, however it hid: with a step uid of its runner's own,
every process of the uid but the launcher is killed when the step ends (a new session and a
double fork included), before the runner takes its next step, and a timeout or a cancel
SIGTERMs every one of them first. One runner, as in a pod, under the containers'
capabilities (SETUID, SETGID, KILL)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.container_privileges import container_runner_prefix
from tests.support.stack import Stack, StackFactory, step_of, until
from tests.support.step_uids import own_step_uids, shared_dir

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="steps change uid only under root")

# Two processes that hide from the step's process group: one in a session of its own, and a
# daemon (forked twice, its parent gone: no child of the step's shell, in a session of its own).
LEAVE = """
setsid sh -c 'echo $$ > {d}/{name}-setsid.pid; exec sleep 300' &
(setsid sh -c 'echo $$ > {d}/{name}-daemon.pid; exec sleep 300' &)
while [ ! -s {d}/{name}-setsid.pid ] || [ ! -s {d}/{name}-daemon.pid ]; do sleep 0.02; done
"""
# What is left of the earlier steps, seen from a step of the same uid: the processes they
# left, and any process of the uid but this shell, its launcher ($PPID) and its own children.
LOOK = """
for f in {d}/*.pid; do p=$(cat $f); [ -e /proc/$p ] && echo "alive $f $p"; done
me=$(id -u)
for s in /proc/[0-9]*/status; do
  p=${{s#/proc/}}; p=${{p%/status}}
  [ "$p" = $$ ] || [ "$p" = $PPID ] && continue
  set -- $(awk '/^Uid:/ {{u = $2}} /^PPid:/ {{pp = $2}} END {{print u, pp}}' $s 2> /dev/null)
  [ "$1" = "$me" ] && [ "$2" != $$ ] && echo "other $p $(tr '\\0' ' ' < /proc/$p/cmdline)"
done
echo looked
"""


async def one_runner(stack: StackFactory) -> Stack:
    s = await stack(runners=0, wait=False)
    s.start(
        "runner-0",
        argv_prefix=container_runner_prefix(),
        HEDDLE_STEP_USER="",
        HEDDLE_STEP_UIDS=own_step_uids(),
    )
    await s.wait_ready(1)
    return s


def left(d: Path) -> dict[str, bool]:
    """Each process the steps left (by its pid file), and whether it still exists."""
    return {f.stem: Path(f"/proc/{f.read_text().strip()}").exists() for f in d.glob("*.pid")}


async def test_what_a_step_leaves_is_gone_before_the_runner_s_next_step(
    stack: StackFactory,
) -> None:
    s = await one_runner(stack)
    d = shared_dir()
    try:
        # a succeeds and b, its continuation on the same runner, fails: each leaves two.
        x_steps = [
            {"id": "a", "command": LEAVE.format(d=d, name="a")},
            {"id": "b", "command": LOOK.format(d=d) + LEAVE.format(d=d, name="b") + "exit 3"},
        ]
        x_steps[1]["dependsOn"] = ["a"]
        x = await s.wait_run(await s.submit({"steps": x_steps}), 60)
        a, b = step_of(x, "a"), step_of(x, "b")
        assert (a["status"], b["status"], b["exitCode"]) == ("succeeded", "failed", 3), x
        # Killed and reaped before each step's outcome was reported.
        assert left(d) == dict.fromkeys(("a-setsid", "a-daemon", "b-setsid", "b-daemon"), False), (
            left(d)
        )
        assert b["stdoutTail"].strip() == "looked", b  # a's were gone when b started
        y = await s.wait_run(await s.submit({"steps": [{"id": "y", "command": LOOK.format(d=d)}]}))
        assert step_of(y, "y")["stdoutTail"].strip() == "looked", step_of(y, "y")
    finally:
        shutil.rmtree(d, ignore_errors=True)


# A child in the step's group and one in a session of its own, each trapping TERM.
TRAPS = """
sh -c 'trap "echo term > {d}/group.term; exit 0" TERM; echo $$ > {d}/group.pid
  while :; do sleep 0.1; done' &
setsid sh -c 'trap "echo term > {d}/session.term; exit 0" TERM; echo $$ > {d}/session.pid
  while :; do sleep 0.1; done' &
while [ ! -s {d}/group.pid ] || [ ! -s {d}/session.pid ]; do sleep 0.02; done
sleep 300
"""


@pytest.mark.parametrize("how", ["timeout", "cancel"])
async def test_a_timeout_or_a_cancel_sigterms_every_process_of_the_step(
    stack: StackFactory, how: str
) -> None:
    s = await one_runner(stack)
    d = shared_dir()
    try:
        step = {"id": "t", "command": TRAPS.format(d=d)}
        if how == "timeout":
            step["timeoutSeconds"] = 2
        run_id = await s.submit({"steps": [step]})
        if how == "cancel":
            ready = lambda: (d / "group.pid").exists() and (d / "session.pid").exists()  # noqa: E731
            await until(ready, 30, "the step's children")
            status, _ = await s.request("POST", f"/api/runs/{run_id}/cancel")
            assert status in (200, 202), status
        t = step_of(await s.wait_run(run_id, 60), "t")
        expected = {
            "timeout": ("failed", "timed out after 2 s"),
            "cancel": ("cancelled", t["reason"]),
        }
        assert (t["status"], t["reason"]) == expected[how], t
        # A cancelled run is the orchestrator's word: its runner kills the step meanwhile.
        await until(lambda: not any(left(d).values()), 20, "the step's processes to end")
        # Each got the TERM (and ran its trap), the one in its own session too.
        assert sorted(p.name for p in d.glob("*.term")) == ["group.term", "session.term"]
        assert left(d) == {"group": False, "session": False}
    finally:
        shutil.rmtree(d, ignore_errors=True)
