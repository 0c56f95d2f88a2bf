"""One pass of a batch's writes (effect_writes.py): which write of each record is its last,
the acknowledgements to wait for, and waiting for them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from heddle.services.orchestrator.bulk_writes import ACK_TIMEOUT
from heddle.services.orchestrator.decisions import (
    AwaitHandoff,
    Continue,
    Effect,
    Enqueue,
    PersistRun,
    PersistStep,
)

MID_EXPANSION = "orchestrator.mid_expansion"


async def settle(futures: list[asyncio.Future]) -> None:
    """Wait for the acknowledgements of ``futures``; raise if one failed or is late."""
    if not futures:
        return
    done, pending = await asyncio.wait(futures, timeout=ACK_TIMEOUT)
    for fut in pending:
        fut.cancel()
    # Every failure retrieved, not only the first: the rest are not lost futures.
    failed = [exc for exc in (fut.exception() for fut in done) if exc is not None]
    if pending:
        raise TimeoutError(f"{len(pending)} writes unacknowledged")
    if failed:
        raise failed[0]


def abandon(futures: list[asyncio.Future]) -> None:
    for fut in futures:
        if fut.done():
            if not fut.cancelled():
                fut.exception()
        else:
            fut.cancel()


MID_EXPANSION = "orchestrator.mid_expansion"


def expands(effects: list[Effect]) -> bool:
    """Whether a batch stores a forEach step's new instances (services/orchestrator/loops.py)."""
    return any(
        isinstance(e, PersistStep) and e.previous == "new" and e.step.parent is not None
        for e in effects
    )


@dataclass(slots=True)
class Batch:
    """One pass over a batch's effects: the index of each record's last write (a record
    changed several times is written once, in its final state) and the acknowledgements
    to wait for."""

    run_id: str
    create_run: bool
    last_step_write: dict[str, int]
    last_run_write: int
    futures: list[asyncio.Future] = field(default_factory=list)
    written: set[str] = field(default_factory=set)  # step records already sent in this pass
    handed: set[str] = field(default_factory=set)  # steps offered to a runner directly

    @classmethod
    def of(cls, run_id: str, effects: list[Effect], create_run: bool) -> Batch:
        steps: dict[str, int] = {}
        handed: set[str] = set()
        last_run = -1
        for i, e in enumerate(effects):
            if isinstance(e, PersistStep):
                steps[e.step.id] = i
            elif isinstance(e, PersistRun):
                last_run = i
            elif isinstance(e, Enqueue) and e.handoff is not None:
                handed.add(e.ready.step_id)
            elif isinstance(e, Continue):
                handed.add(e.ready.step_id)
            elif isinstance(e, AwaitHandoff):
                handed.add(e.step_id)
        return cls(run_id, create_run, steps, last_run, handed=handed)

    async def after_new_run(self) -> None:
        """In a new run's pass, what goes after its run record waits until it is stored: a
        submit of a run that exists (a runId chosen twice) must not replace that run's
        schedules, gates' records or deliveries with its own."""
        if self.create_run:
            await settle(self.futures)
            self.futures = []
