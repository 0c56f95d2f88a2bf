"""The runner's process path against real processes: exit codes, the process group killed on
timeout and on cancel, leftovers killed when the shell exits, output tails and order."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from heddle.services.runner_agent.process import StepProcess

from bench.procfs import group_members
from tests.launchers import launched_as

ENV = dict(os.environ)
SPAWN: dict[str, Any] = {}  # how this test's steps are spawned (the spawner fixture)


@pytest.fixture(autouse=True, params=["by the runner", "by a launcher"])
async def spawner(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Every test twice: steps spawned by the runner itself, and by a step launcher (as
    nobody where the tests run as root)."""
    if request.param == "by the runner":
        yield
        return
    async with launched_as() as spawn:
        SPAWN.update(spawn)
        try:
            yield
        finally:
            SPAWN.clear()


def step(command: str, timeout: float | None = 10.0, grace: float = 0.5, tail: int = 64, sink=None):
    return StepProcess(command, ENV, timeout, grace, tail, sink, **SPAWN)


async def group_gone(pgid: int) -> bool:
    """Killed processes close their files (the pipes) a moment before they are gone."""
    for _ in range(100):
        if not group_members(pgid):
            return True
        await asyncio.sleep(0.02)
    return False


def no_open_fds_leaked(before: set[str]) -> None:
    assert set(os.listdir("/proc/self/fd")) <= before | {"0", "1", "2"}


async def test_exit_codes_and_signals() -> None:
    fds = set(os.listdir("/proc/self/fd"))
    assert (await step("true").run()).outcome == "succeeded"
    result = await step("exit 3").run()
    assert (result.outcome, result.exit_code, result.reason) == ("failed", 3, "exit code 3")
    result = await step("kill -KILL $$").run()
    assert (result.outcome, result.exit_code, result.reason) == (
        "failed",
        -9,
        "killed by signal 9",
    )
    result = await step("exec /nonexistent/command").run()
    assert result.outcome == "failed" and result.exit_code == 127
    assert "not found" in result.stderr_tail or "No such file" in result.stderr_tail
    no_open_fds_leaked(fds)


async def test_environment_and_stdin() -> None:
    env = dict(ENV, HEDDLE_X="42")
    result = await StepProcess('echo "$HEDDLE_X"; cat', env, 10, 0.5, 64, **SPAWN).run()
    assert result.stdout_tail == "42"  # stdin is /dev/null: cat ends at once


async def test_timeout_kills_a_term_trapping_group() -> None:
    p = step("trap '' TERM; sleep 60 & sleep 60 & trap '' TERM; sleep 60", timeout=0.3, grace=0.4)
    t0 = time.monotonic()
    result = await p.run()
    elapsed = time.monotonic() - t0
    assert result.outcome == "timed_out"
    assert result.reason == "timed out after 0.3 s"
    assert result.exit_code == -9  # TERM was ignored: KILL after the grace
    assert 0.6 <= elapsed < 3.0
    assert await group_gone(p.pid)


async def test_timeout_term_is_enough_for_a_well_behaved_command() -> None:
    p = step("sleep 60", timeout=0.2, grace=5)
    t0 = time.monotonic()
    result = await p.run()
    assert result.outcome == "timed_out" and result.exit_code == -15
    assert time.monotonic() - t0 < 2.0
    assert await group_gone(p.pid)


async def test_background_children_die_with_the_shell() -> None:
    fds = set(os.listdir("/proc/self/fd"))
    p = step("sleep 60 & (trap '' TERM; sleep 60) & echo done")
    t0 = time.monotonic()
    result = await p.run()
    assert (result.outcome, result.stdout_tail) == ("succeeded", "done")
    assert time.monotonic() - t0 < 1.5  # no waiting for the pipes the children held
    assert await group_gone(p.pid)
    no_open_fds_leaked(fds)


async def test_cancel_kills_the_group() -> None:
    p = step("trap '' TERM; sleep 60 & sleep 60", grace=0.3)
    task = asyncio.create_task(p.run())
    await p.started.wait()
    await asyncio.sleep(0.1)
    assert len(group_members(p.pid)) >= 2
    p.kill("cancelled", "asked to")
    p.kill("timed_out", "too late")  # the first reason wins
    result = await asyncio.wait_for(task, 5)
    assert (result.outcome, result.reason) == ("cancelled", "asked to")
    assert await group_gone(p.pid)


async def test_task_cancellation_kills_the_group_and_reaps() -> None:
    fds = set(os.listdir("/proc/self/fd"))
    p = step("sleep 60 & sleep 60")
    task = asyncio.create_task(p.run())
    await p.started.wait()
    await asyncio.sleep(0.1)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    for _ in range(100):
        await asyncio.sleep(0.02)
        if not group_members(p.pid) and p.returncode is not None:
            break
    assert await group_gone(p.pid)
    assert p.returncode == -9  # reaped, not a zombie
    no_open_fds_leaked(fds)


async def test_output_in_order_per_stream_and_tails() -> None:
    got: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}

    async def sink(name: str, data: bytes) -> None:
        got[name] += data
        await asyncio.sleep(0)  # a sink that yields must not reorder anything

    cmd = "i=0; while [ $i -lt 3000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done"
    result = await step(cmd, tail=20, sink=sink).run()
    assert result.outcome == "succeeded"
    assert got["stdout"] == b"".join(b"out%d\n" % i for i in range(3000))
    assert got["stderr"] == b"".join(b"err%d\n" % i for i in range(3000))
    assert result.stdout_tail == bytes(got["stdout"][-20:]).decode().rstrip("\n")
    assert result.stderr_tail.endswith("err2999")


async def test_a_slow_sink_holds_the_command_back_and_loses_nothing() -> None:
    total = 0

    async def sink(name: str, data: bytes) -> None:
        nonlocal total
        total += len(data)
        await asyncio.sleep(0.001)

    result = await step("head -c 8000000 /dev/zero", sink=sink).run()
    assert result.outcome == "succeeded" and total == 8_000_000


async def test_a_one_mebibyte_line_and_invalid_utf8() -> None:
    chunks: list[bytes] = []

    async def sink(name: str, data: bytes) -> None:
        chunks.append(data)

    cmd = "head -c 1048576 /dev/zero | tr '\\0' x; echo; printf '\\377\\376end\\n'"
    result = await step(cmd, tail=16, sink=sink).run()
    data = b"".join(chunks)
    assert data == b"x" * 1048576 + b"\n\xff\xfeend\n"
    assert result.outcome == "succeeded"
    assert result.stdout_tail.endswith("\ufffd\ufffdend")


async def test_output_after_the_shell_exits_is_drained() -> None:
    got = bytearray()

    async def sink(name: str, data: bytes) -> None:
        got.extend(data)

    # The last writer is the shell itself, writing right before it exits.
    result = await step("seq 1 20000", sink=sink).run()
    assert result.outcome == "succeeded"
    assert got == b"".join(b"%d\n" % i for i in range(1, 20001))


async def test_many_steps_in_a_row_leave_nothing_behind() -> None:
    fds = set(os.listdir("/proc/self/fd"))
    results = await asyncio.gather(*(step(f"exit {i % 4}").run() for i in range(50)))
    assert [r.exit_code for r in results] == [i % 4 for i in range(50)]
    no_open_fds_leaked(fds)


async def test_a_failing_sink_does_not_stop_the_command() -> None:
    async def sink(name: str, data: bytes) -> None:
        raise RuntimeError("gone")

    result = await step("head -c 1000000 /dev/zero; echo end", sink=sink).run()
    assert result.outcome == "succeeded" and result.stdout_tail.endswith("end")
