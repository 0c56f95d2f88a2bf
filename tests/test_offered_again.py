"""A runner offered an attempt it took (services/runner_agent/taken.py) answers "accepted"
again and does not run it a second time: while it runs it, and once it has run. Under
another ticket it is another offer: the outcome under the first would not count. Real
processes: a runner, and offers sent as a dispatcher given the ready message again would."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AssignReply, StepReady, encode

from tests.conftest import StackFactory
from tests.test_lost_assignments import ready_once

pytestmark = pytest.mark.fault


async def offer(nc, ready: StepReady) -> AssignReply:  # type: ignore[no-untyped-def]
    for _ in range(20):
        reply = await nc.request(names.runner_assign("runner-0"), encode(ready), timeout=5)
        answer = msgspec.json.decode(reply.data, type=AssignReply)
        # A runner just started on a busy machine may have stood still (shared/runtime/stalls.py):
        # it refuses, and nothing is taken.
        if answer.accepted or not (answer.reason or "").startswith("stale"):
            return answer
        await asyncio.sleep(0.2)
    return answer


async def until(path: Path, text: str) -> None:
    for _ in range(200):
        if path.exists() and path.read_text() == text:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} holds {path.read_text() if path.exists() else None!r}")


async def test_an_attempt_offered_again_is_accepted_and_runs_once(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=1, services=("orchestrator", "gateway"))
    ran = tmp_path / "ran"
    ready = msgspec.structs.replace(
        ready_once("r-again", ran), command=f"echo once >> {ran}; sleep 1"
    )
    nc = await s.connect()
    try:
        # Offered twice before its first report: both answered with it.
        first, second = await asyncio.gather(offer(nc, ready), offer(nc, ready))
        assert first.accepted and second.accepted
        await until(ran, "once\n")
        # Offered while it runs, its first report out: answered at once.
        assert (await offer(nc, ready)).accepted
        # Offered once it has run: answered, not run again.
        await asyncio.sleep(1.5)
        assert (await offer(nc, ready)).accepted
        await asyncio.sleep(0.5)
        assert ran.read_text() == "once\n"
        assert s.logs("runner-0").count('"accepted again"') == 3
        # The same attempt under a new ticket (its run rebuilt after its queued record was
        # lost) is another offer: it runs again.
        assert (await offer(nc, msgspec.structs.replace(ready, ticket="anew"))).accepted
        await until(ran, "once\nonce\n")
        await asyncio.sleep(1.2)  # "sleep 1": done, the runner is free again
        # Another attempt of the same step is a new one: it runs.
        assert (await offer(nc, msgspec.structs.replace(ready, attempt=2))).accepted
        await until(ran, "once\nonce\nonce\n")
    finally:
        await nc.close()
