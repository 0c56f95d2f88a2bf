"""`heddle up`'s supervisor stops every process it started, one it is starting again at that
moment included: a service that crashed and is being restarted when `heddle up` stops must not
be left running, orphaned."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

from heddle.services.local.supervisor import Child, Supervisor

RESTART_DELAY = 0.05
# The first start crashes at once; every later one lives on, as a service does.
CRASH_ONCE = 'echo $$ >> "$PIDS"; [ "$(wc -l < "$PIDS")" -gt 1 ] && exec sleep 30; exit 1'
# A service that takes a moment to drain on SIGTERM, as Heddle's do: the stop waits for it.
DRAINS = "trap 'sleep 0.2; exit 0' TERM; while :; do sleep 0.01; done"


def alive(pid: int) -> bool:
    """Whether ``pid`` runs and is not a zombie (this test's own children are reaped by the
    supervisor's waits; an orphan it lost is not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def stop_while_restarting(pids: Path, after: float) -> list[int]:
    pids.unlink(missing_ok=True)
    env = {**os.environ, "PIDS": str(pids)}
    children = [
        Child("svc", ["sh", "-c", CRASH_ONCE], env),
        Child("other", ["sh", "-c", DRAINS], env),
    ]
    supervisor = Supervisor(children, out=io.StringIO(), restart_delay=RESTART_DELAY)
    await supervisor.start()
    await asyncio.sleep(after)
    await supervisor.stop(grace=2.0)
    await asyncio.sleep(0.1)  # a process started in the stop's shadow has written its pid
    return [int(line) for line in pids.read_text().split()] if pids.exists() else []


async def test_a_service_restarted_as_heddle_up_stops_is_stopped_too(tmp_path: Path) -> None:
    left: list[int] = []
    # Stop at moments spread over the restart: before it, while it spawns, after it.
    for i in range(20):
        started = await stop_while_restarting(tmp_path / "pids", i * 0.005)
        left += [pid for pid in started if alive(pid)]
    for pid in left:
        os.kill(pid, 9)  # this test's own orphans, by pid
    assert left == []


async def test_every_line_is_relayed_in_order_long_ones_and_the_last_unended_too() -> None:
    """A burst of lines, one longer than a pipe's read, and a last one with no end of line:
    each is passed on with its child's name, none lost, none merged with another."""
    script = (
        "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; "
        "head -c 200000 /dev/zero | tr '\\0' x; echo; printf 'é last'"
    )
    out = io.StringIO()
    child = Child("svc", ["sh", "-c", script], dict(os.environ))
    supervisor = Supervisor([child], out=out, restart_delay=60)
    await supervisor.start()
    for _ in range(200):
        if "exited with 0" in out.getvalue():  # its output all read: at its end of file
            break
        await asyncio.sleep(0.05)
    await supervisor.stop(grace=2.0)
    lines = out.getvalue().splitlines()
    assert all(line.startswith("svc | ") for line in lines)
    said = [line[len("svc | ") :] for line in lines]
    assert said[:2000] == [f"line-{i}" for i in range(2000)]
    assert "".join(said[2000:-2]) == "x" * 200_000
    assert len({len(part) for part in said[2000:-3]}) == 1  # parts of one size, but the last
    assert said[-2:] == ["é last", "exited with 0; restarting in 60s"]
