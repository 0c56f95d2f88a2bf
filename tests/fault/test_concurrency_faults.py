"""A concurrency key across orchestrator deaths (docs/pools.md, "Concurrency limits"): an
orchestrator SIGKILLed while a run holds the key and another is queued for it, then one that
dies once the holder's end is stored but before its key is given back: the restarted one
drops the holder that ended, and the queued run starts, after it, never beside it."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.integration.test_concurrency import deploy, key_document, trigger
from tests.support.stack import StackFactory, until


async def test_a_queued_run_starts_after_orchestrator_deaths(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    ledger = tmp_path / "ledger"
    ledger.touch()
    assert (await s.request("POST", "/api/workflows", json=deploy(ledger, 3)))[0] == 201
    status, holder = await trigger(s, "holder")
    assert status == 201, holder
    await s.wait_step(holder["runId"], "go", {"running"})
    status, queued = await trigger(s, "queued")
    assert status == 201, queued
    why = (await s.run(queued["runId"]))["waitingFor"]
    assert why["reason"] == "concurrency", why
    assert (why["key"], why["heldBy"]) == ("deploy/prod", holder["runId"]), why
    assert (
        why["sentence"] == f"Waits for concurrency key deploy/prod, held by run {holder['runId']}."
    )

    s.kill("orchestrator", signal.SIGKILL)
    # Back, and gone again once the holder's end is stored, its key not given back.
    dying = s.start("orchestrator", HEDDLE_FAILPOINTS="orchestrator.before_key_given_back=exit")
    await until(lambda: not dying.alive(), 30, "the orchestrator never reached the failpoint")
    assert (await s.run(holder["runId"]))["status"] == "succeeded"
    stale = await key_document(s, "deploy/prod")
    assert (stale.holders, stale.queue) == ([holder["runId"]], [queued["runId"]])

    s.start("orchestrator")
    run = await s.wait_run(queued["runId"], timeout=30)
    assert run["status"] == "succeeded", run
    assert ledger.read_text().split() == ["+holder", "-holder", "+queued", "-queued"]
    after = await key_document(s, "deploy/prod")
    assert (after.holders, after.queue) == ([], [])
