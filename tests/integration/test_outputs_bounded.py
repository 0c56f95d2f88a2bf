"""A step's outputs file is bounded while the step writes it, not once it exits
(services/runner_agent/outputs_file.py, file_watch.py): past HEDDLE_OUTPUTS_MAX_BYTES it is
emptied at once and the step killed with the reason an oversized file always had."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.container_privileges import (
    container_runner_prefix,
    container_step_user,
    run_as_runner_container,
)
from tests.support.stack import Stack, StackFactory, step_of

LIMIT = 65536
CHUNKS = 200  # of 1 MiB each, a few ms apart: a second or two in all, however fast memory is
WRITTEN = CHUNKS * 1_048_576
TOO_LARGE = re.compile(
    r"bad outputs: the outputs file is (\d+) bytes; the limit is 65536 \(HEDDLE_OUTPUTS_MAX_BYTES\)"
)


def step(name: str, write: str, shared: Path) -> dict[str, str]:
    """A step that writes past the limit, records the file's size (after the write, and on
    the kill in its TERM trap, which runs once the write is over), then sleeps and leaves a
    marker: a step killed while it runs never leaves it. The sleep is waited for by ``wait``,
    which a trapped signal interrupts: a kill that reaches ``sleep`` between its fork and its
    exec is lost to it, and a foreground sleep would hold the trap back to its end."""
    size = f'stat -c %s "$HEDDLE_OUTPUTS" > {shared}/{name}-size'
    return {
        "id": name,
        "command": f"trap '{size}; exit 143' TERM\n{write}\n{size}\nsleep 30 & wait $!\n"
        f"touch {shared}/{name}-slept",
    }


@pytest.fixture
def shared() -> Iterator[Path]:
    """Where the steps leave their notes: a step user can write there."""
    folder = Path(tempfile.mkdtemp(prefix="heddle-test-", dir="/tmp"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


async def runners(stack: StackFactory, in_container: bool) -> Stack:
    """Two runners: the tests' own (steps as the runner), or under the containers'
    capabilities with their step user."""
    if not in_container:
        return await stack(runners=2, HEDDLE_KILL_GRACE="10")
    # The grace lets the TERM trap record the size on a loaded machine; it exits at once.
    s = await stack(runners=0, wait=False, HEDDLE_KILL_GRACE="10")
    step_user, _ = container_step_user()
    for name in ("runner-0", "runner-1"):
        s.start(name, argv_prefix=container_runner_prefix(), HEDDLE_STEP_USER=step_user)
    await s.wait_ready(2)
    return s


@pytest.mark.parametrize("in_container", [False, True], ids=["own-user", "container"])
async def test_a_step_writing_past_the_limit_is_killed_while_it_runs(
    stack: StackFactory, shared: Path, in_container: bool
) -> None:
    s = await runners(stack, in_container)
    # One write of 1 MiB, then nothing: the runner sees the file at exactly that size, and
    # empties it before the kill that runs the trap.
    burst = step(
        "burst",
        'dd if=/dev/zero bs=1048576 count=1 conv=notrunc oflag=append of="$HEDDLE_OUTPUTS"'
        " 2>/dev/null",
        shared,
    )
    # 200 MiB into memory, paced so that the runner, even on a loaded machine, gets the CPU
    # to see it long before the end (unpaced, the write can end before it runs at all).
    flood = step(
        "flood",
        f"for i in $(seq {CHUNKS}); do yes x | head -c 1048576; sleep 0.005; done"
        ' >> "$HEDDLE_OUTPUTS"',
        shared,
    )
    run_ids = [await s.submit({"steps": [one]}) for one in (burst, flood)]
    burst_run, flood_run = [await s.wait_run(run_id, timeout=60) for run_id in run_ids]

    b, f = step_of(burst_run, "burst"), step_of(flood_run, "flood")
    assert (burst_run["status"], b["status"]) == ("failed", "failed"), b
    assert b["reason"] == (
        "bad outputs: the outputs file is 1048576 bytes; the limit is 65536 "
        "(HEDDLE_OUTPUTS_MAX_BYTES)"
    )
    assert (flood_run["status"], f["status"]) == ("failed", "failed"), f
    seen = TOO_LARGE.fullmatch(f["reason"] or "")
    assert seen is not None and LIMIT < int(seen.group(1)) < WRITTEN, f["reason"]
    assert b["outputs"] == {} and f["outputs"] == {}
    # Ended while they ran: the terminal runs never slept, and were killed, not exited.
    assert not (shared / "burst-slept").exists() and not (shared / "flood-slept").exists()
    assert b["exitCode"] == f["exitCode"] == 143, (b, f)
    # Emptied at once: nothing was written after the 1 MiB, and the flood was cut.
    assert (shared / "burst-size").read_text().strip() == "0"
    assert int((shared / "flood-size").read_text()) < WRITTEN


WATCH_AS_STEP_USER = """
import asyncio, os, sys
from heddle.services.runner_agent.isolation import resolve_step_user
from heddle.services.runner_agent.outputs_file import OutputsFile


async def main():
    told = asyncio.Event()
    file = OutputsFile(resolve_step_user(sys.argv[1]), 100, lambda reason: told.set())
    owner = os.fstat(file.fd).st_uid
    os.write(file.fd, b"x" * 1000)  # as the step would: the runner's descriptor is O_RDWR
    await asyncio.wait_for(told.wait(), 30)
    print(owner)
    print(file.take(True, 100))


asyncio.run(main())
"""


def test_a_step_user_s_outputs_file_is_watched_without_dac_override() -> None:
    """Adding a watch needs read permission on the step user's 0600 file, which a runner
    with only SETUID, SETGID and KILL has as that user alone (file_ids.py)."""
    step_user, uid = container_step_user()
    out = run_as_runner_container(WATCH_AS_STEP_USER, step_user)
    assert out.stdout.splitlines() == [
        str(uid),
        "bad outputs: the outputs file is 1000 bytes; the limit is 100 (HEDDLE_OUTPUTS_MAX_BYTES)",
    ], (out.returncode, out.stderr)
