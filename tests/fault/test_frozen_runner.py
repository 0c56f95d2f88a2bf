"""A runner that stood still (SIGSTOP, as a frozen pod or a paused machine would) refuses the
assignments that waited for it through the stall (shared/runtime/stalls.py): their
offers were given up, and the step went to another runner meanwhile. One that stood still
with a step's command started, before it answered, keeps that step: it is asked again
before any other runner is offered it (services/dispatcher/placing.py). Real processes."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import nats.errors
import pytest
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AssignReply, encode

from bench.procfs import descendants
from tests.support.offers import ready_once
from tests.support.stack import Stack, StackFactory, freeze, step_of, until


async def test_an_assignment_that_waited_through_a_stall_is_refused(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=1, services=("orchestrator", "gateway"))
    runner = s.procs["runner-0"]
    ran = tmp_path / "ran"
    nc = await s.connect()
    try:
        freeze(runner.pid)
        with pytest.raises(nats.errors.TimeoutError):  # an offer given up, as a dispatcher's
            await nc.request(
                names.runner_assign("runner-0"), encode(ready_once("r-stale", ran)), timeout=1
            )
        await asyncio.sleep(0.5)  # frozen 1.5 s, the limit (HEDDLE_ASSIGN_TIMEOUT / 2) 0.5 s
        os.kill(runner.pid, signal.SIGCONT)
        await asyncio.sleep(1.0)
        assert not ran.exists(), "the runner ran an assignment whose offer was given up"
        assert "stale: this runner stood still for" in s.logs("runner-0")
        # Awake again, it takes what is offered now.
        reply = await nc.request(
            names.runner_assign("runner-0"), encode(ready_once("r-fresh", ran)), timeout=5
        )
        assert msgspec.json.decode(reply.data, type=AssignReply).accepted
        for _ in range(100):
            if ran.exists():
                break
            await asyncio.sleep(0.05)
        assert ran.read_text() == "once\n"
    finally:
        await nc.close()


async def test_a_step_offered_to_a_frozen_runner_runs_once_elsewhere(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    ran = tmp_path / "ran"
    frozen = s.procs["runner-0"]
    freeze(frozen.pid)
    try:
        # Two ready steps for two free runners: one of them is offered to the frozen one.
        run_id = await s.submit(
            {"steps": [{"id": i, "command": f"echo {i} >> {ran}"} for i in ("a", "b")]}
        )
        run = await s.wait_run(run_id, timeout=20)
        assert run["status"] == "succeeded"
        assert [step_of(run, i)["attempt"] for i in ("a", "b")] == [1, 1]
        assert "runner did not answer" in s.logs("dispatcher")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    await asyncio.sleep(1.5)
    assert sorted(ran.read_text().split()) == ["a", "b"], "a step ran twice"
    assert "stale: this runner stood still for" in s.logs("runner-0")


def _runner_of(s: Stack, pid: int) -> int:
    """The runner process ``pid`` (a step's shell) descends from."""
    [runner] = [
        p.pid
        for name, p in s.procs.items()
        if name.startswith("runner") and pid in descendants(p.pid)
    ]
    return runner


async def _frozen_once_started(
    s: Stack,
    steps: list[dict],
    tmp_path: Path,
    frozen_for: float = 2.5,
    while_frozen: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run ``steps``, the last of which waits for a file; once that step's command started
    (its shell's pid in a ledger), its runner stands still past the offerer's wait (1 s,
    HEDDLE_ASSIGN_TIMEOUT), before it answered, for ``frozen_for`` seconds, while
    ``while_frozen`` runs. The step runs once, as attempt 1."""
    ledger, go = tmp_path / "ledger", tmp_path / "go"
    last = steps[-1]["id"]
    steps[-1]["command"] = f"echo $$ >> {ledger}; until [ -e {go} ]; do sleep 0.05; done"
    run_id = await s.submit({"steps": steps})
    await until(ledger.exists, 30, "the step never started")
    runner = _runner_of(s, int(ledger.read_text().split()[0]))
    freeze(runner)
    thawed_at = asyncio.get_running_loop().time() + frozen_for
    if while_frozen is not None:
        await while_frozen()
    await asyncio.sleep(max(0.0, thawed_at - asyncio.get_running_loop().time()))
    os.kill(runner, signal.SIGCONT)
    await s.wait_step(run_id, last, {"running"})
    go.touch()
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "succeeded", run
    assert step_of(run, last)["attempt"] == 1
    assert len(ledger.read_text().split()) == 1, "a step ran twice"


# A stall shorter than the silence limit (4 s) and the registry's TTL (5 s): the runner is
# not taken for dead, and stays in the pool. It answers half a second after the command
# starts (its first report), so it is frozen before it can.
ANSWER_LATE = {"HEDDLE_STARTED_REPORT_DELAY": "0.5"}
NOT_DEAD = {"HEDDLE_HEARTBEAT_GRACE": "20", "HEDDLE_REGISTRY_TTL": "5", **ANSWER_LATE}


async def test_a_runner_frozen_with_its_step_started_keeps_it(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2, **NOT_DEAD)
    await _frozen_once_started(s, [{"id": "w"}], tmp_path)  # offered by the dispatcher


async def test_a_runner_frozen_with_a_step_handed_to_it_keeps_it(
    stack: StackFactory, tmp_path: Path
) -> None:
    # No continuations: the step after "a" is handed to a's runner by the orchestrator.
    s = await stack(runners=2, HEDDLE_CONTINUE="off", **NOT_DEAD)
    steps = [{"id": "a", "command": "true"}, {"id": "b", "dependsOn": ["a"]}]
    await _frozen_once_started(s, steps, tmp_path)


async def test_a_dispatcher_stopped_while_its_runner_is_silent_gives_it_no_other(
    stack: StackFactory, tmp_path: Path
) -> None:
    """SIGTERM, as a rolling update sends, reaches the dispatcher whose offer the frozen
    runner left unanswered. A stopping dispatcher gives the steps in its hand back to the
    other dispatchers, but not this one: handed on, it would go to another runner at once
    and run twice. It asks the same runner again until it answers, within its grace."""
    # A silence limit of 6 s, a registry entry good for 8: the 3.5 s stall is no death.
    s = await stack(
        runners=2,
        dispatchers=2,
        HEDDLE_HEARTBEAT_GRACE="30",
        HEDDLE_REGISTRY_TTL="8",
        HEDDLE_SHUTDOWN_GRACE="6",
        **ANSWER_LATE,
    )
    dispatchers = ("dispatcher", "dispatcher-1")
    stopped: list[str] = []

    def unanswered() -> list[str]:
        return [d for d in dispatchers if '"msg":"runner did not answer"' in s.logs(d)]

    async def stop_the_offerer() -> None:
        await until(lambda: bool(unanswered()), 10, "no offer went unanswered")
        stopped.extend(unanswered())
        os.kill(s.procs[stopped[0]].pid, signal.SIGTERM)  # not waited for: it drains

    await _frozen_once_started(
        s, [{"id": "w"}], tmp_path, frozen_for=3.5, while_frozen=stop_the_offerer
    )
    victim = s.procs[stopped[0]]
    await until(lambda: not victim.alive(), 10, f"{stopped[0]} did not stop")
    assert victim.popen.returncode == 0  # drained and stopped, not killed at its grace's end
