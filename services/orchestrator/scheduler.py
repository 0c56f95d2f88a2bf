"""The cron scheduler: turns each due slot of each scheduled workflow into exactly one run.

Every tick (``HEDDLE_CRON_TICK``) it reads the workflows' ``latest`` summaries and the cron
cursors (two filtered replays), plans each unpaused schedule with ``shared/core/cron_plan.py``,
and for each planned slot:

1. claims it: ``kv.create("<workflow>.<slot>")`` in heddle-cron, which succeeds at most once
   across every scheduler there is;
2. sends ``SubmitRun`` with the run id derived from workflow and slot, and
   ``Nats-Msg-Id: submit.<run>``: JetStream drops a second copy and the orchestrator
   ignores a run id it already has, so a slot can never become two runs;
3. once every submit is acknowledged, moves the workflow's cursor (compare-and-set) past
   the slots.

A scheduler that loses a claim still sends the identical submit. That is what makes a crash
between claim and submit harmless: the cursor has not moved, so the next tick (here or in
another scheduler) plans the slot again, finds it claimed, and sends the submit that was lost.

The clock is injected: ``WallClock`` in production, ``ScaledClock`` (``HEDDLE_CRON_TIME_SCALE``)
for end-to-end tests, anything with ``now()`` and ``of_wall()`` in unit tests. ``of_wall``
maps the wall-clock stamps the gateway writes (registration, pauses) onto the scheduler's
timeline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, cast

from heddle.shared.broker import registry
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.broker.nats_types import KeyWrongLastSequenceError
from heddle.shared.core import concurrency
from heddle.shared.core.cron_plan import plan, scheduled_run_id, slot_stamp
from heddle.shared.core.expressions import ExpressionError
from heddle.shared.runtime.metrics import CRON_HELD, CRON_SLOTS
from heddle.shared.runtime.periodic import Periodic
from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    CronCursor,
    CronSlot,
    SubmitRun,
    WorkflowLatest,
    WorkflowSpec,
    WorkflowVersion,
    cron_cursor_decoder,
    encode,
    workflow_latest_decoder,
)
from heddle.shared.wire.timefmt import now_rfc3339, parse, rfc3339

if TYPE_CHECKING:
    from collections.abc import Callable

    from heddle.shared.broker.buckets import Bucket
    from heddle.shared.broker.nats_types import JetStreamContext

log = logging.getLogger("heddle.orchestrator.scheduler")
CHUNK = 200  # requests in flight at once
ACK_TIMEOUT = 10.0


class Clock(Protocol):
    def now(self) -> float: ...

    def of_wall(self, t: float) -> float: ...


class WallClock:
    def now(self) -> float:
        return time.time()

    def of_wall(self, t: float) -> float:
        return t


class ScaledClock:
    """Real time, sped up ``scale`` times from ``origin`` (a test hook)."""

    def __init__(self, scale: float, origin: float | None = None) -> None:
        self.scale = scale
        self.origin = time.time() if origin is None else origin

    def now(self) -> float:
        return self.of_wall(time.time())

    def of_wall(self, t: float) -> float:
        return self.origin + (t - self.origin) * self.scale


def _dt(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


class Scheduler:
    def __init__(
        self,
        js: JetStreamContext,
        workflows_kv: Bucket,
        cron_kv: Bucket,
        *,
        clock: Clock | None = None,
        backfill: int = 1000,
        interval: float = 1.0,
        room: Callable[[], bool] = lambda: True,
    ) -> None:
        self.js = js
        self.workflows_kv = workflows_kv
        self.cron_kv = cron_kv
        self.clock = clock or WallClock()
        self.backfill = backfill
        self.interval = interval
        # Whether the store has room for new runs beyond its reserve (store_keeper.py): a
        # tick without it plans nothing, so its slots are run once room frees, as after a
        # stop, under the workflow's catchup.
        self.room = room
        self.held = False
        self._versions: dict[tuple[str, int], WorkflowVersion] = {}
        self._periodic = Periodic("cron tick", self.interval, self.tick, log)
        # A slot at or before the previous tick's time was due then and is run late
        # (backfilled); a later one fires on time.
        self._last_tick = self.clock.now()

    async def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()
        if self.held:  # another orchestrator schedules now, and says so itself
            self.held = False
            CRON_HELD.set(0)

    async def tick(self) -> int:
        """Run every due slot of every schedule (up to the backfill limit each); returns how
        many slots were submitted."""
        if not self._has_room():
            return 0
        now = self.clock.now()
        since, self._last_tick = self._last_tick, now
        workflows = [
            workflow_latest_decoder.decode(e.value)
            for e in await read_current(self.workflows_kv, names.WORKFLOW_LATEST_ALL)
        ]
        cursors = {
            e.key.split(".", 1)[0]: (cron_cursor_decoder.decode(e.value), e.revision)
            for e in await read_current(self.cron_kv, names.CRON_CURSOR_ALL)
        }
        total = 0
        for wf in workflows:
            if not wf.schedule or wf.paused:
                continue
            try:
                total += await self._schedule(wf, cursors.get(wf.name), now, since)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one workflow's failure must not stop the others'
                log.warning("scheduling %s failed: %s", wf.name, exc)
        return total

    def _has_room(self) -> bool:
        room = self.room()
        if room == self.held:  # a change: said once
            self.held = not room
            CRON_HELD.set(int(self.held))
            event(log, "cron held: the store is within its reserve" if not room else "cron resumed")
        return room

    async def _schedule(
        self,
        wf: WorkflowLatest,
        cursor: tuple[CronCursor, int] | None,
        now: float,
        since: float | None = None,
    ) -> int:
        assert wf.schedule is not None
        wall = self.clock.of_wall
        after = wall(parse(wf.schedule_since or wf.registered_at).timestamp())
        if cursor is not None:
            after = max(after, parse(cursor[0].through).timestamp())
        skip = [
            (_dt(wall(parse(p.start).timestamp())), _dt(wall(parse(p.end).timestamp())))
            for p in wf.pauses
        ]
        todo = plan(
            wf.schedule,
            wf.timezone,
            _dt(after),
            _dt(now),
            catchup=wf.catchup,
            limit=self.backfill,
            skip=skip,
        )
        if todo.cursor is None:
            return 0
        if todo.slots:
            await self._run_slots(wf, todo.slots, since)
        await self._advance(wf.name, cursor, todo.cursor)
        return len(todo.slots)

    async def _run_slots(
        self, wf: WorkflowLatest, slots: list[datetime], since: float | None = None
    ) -> None:
        version = await self._version(wf.name, wf.version)
        stamp = now_rfc3339()  # one per batch: ties in createdAt fall back to slot order
        claims = [
            CronSlot(
                name=wf.name,
                slot=rfc3339(slot),
                run_id=scheduled_run_id(wf.name, slot),
                version=wf.version,
                claimed_at=stamp,
            )
            for slot in slots
        ]
        won: list[bool] = []
        for i in range(0, len(claims), CHUNK):
            chunk = claims[i : i + CHUNK]
            won += await asyncio.gather(
                *(self._claim(c, slots[i + j]) for j, c in enumerate(chunk))
            )
        await self._submit(wf, version, claims, stamp)
        # Counted by the scheduler that claimed each slot: one count per slot, however many
        # schedulers there are.
        for slot, mine in zip(slots, won, strict=True):
            if mine:
                late = since is not None and slot.timestamp() <= since
                CRON_SLOTS.labels("backfilled" if late else "fired").inc()
        event(
            log,
            "cron slots",
            workflow=wf.name,
            version=wf.version,
            slots=len(slots),
            claimed=sum(won),
            first=claims[0].slot,
            last=claims[-1].slot,
        )

    async def _submit(
        self, wf: WorkflowLatest, version: WorkflowVersion, claims: list[CronSlot], stamp: str
    ) -> None:
        """A submit per slot, pipelined; the stream keeps one per run (``Nats-Msg-Id``)."""
        spec = version.spec
        # Every parameter of a scheduled workflow has a default (shared/core/validation.py).
        defaults = {p.name: p.default for p in spec.params if p.default is not None}
        limited = _concurrency(spec, defaults, wf.name)
        futures = []
        for claim in claims:
            cmd = SubmitRun(
                run_id=claim.run_id,
                steps=spec.steps,
                submitted_at=stamp,
                workflow_name=wf.name,
                version=wf.version,
                trigger="schedule",
                scheduled_for=claim.slot,
                scheduled_tz=wf.timezone or "UTC",
                params=defaults,
                env=spec.env,
                on_exit=spec.on_exit,
                timeout_seconds=spec.timeout_seconds,
                priority=spec.priority,
                notify=spec.notify,
                **limited,
            )
            futures.append(
                await self.js.publish_async(
                    names.cmd_submit(claim.run_id),
                    encode(cmd),
                    headers={"Nats-Msg-Id": names.submit_msg_id(claim.run_id)},
                )
            )
        done, pending = await asyncio.wait(futures, timeout=ACK_TIMEOUT)
        for fut in pending:
            fut.cancel()
        if pending:
            raise TimeoutError(f"{len(pending)} submits unacknowledged")
        for fut in done:
            fut.result()

    async def _claim(self, claim: CronSlot, slot: datetime) -> bool:
        try:
            await self.cron_kv.create(
                names.cron_slot_key(claim.name, slot_stamp(slot)), encode(claim)
            )
        except KeyWrongLastSequenceError:
            return False
        return True

    async def _version(self, name: str, version: int) -> WorkflowVersion:
        key = (name, version)
        if key not in self._versions:
            stored = await registry.get_version(self.workflows_kv, name, version)
            if stored is None:
                raise LookupError(f"{name} version {version} is not stored")
            if len(self._versions) > 1000:
                self._versions.clear()
            self._versions[key] = stored
        return self._versions[key]

    async def _advance(
        self, name: str, cursor: tuple[CronCursor, int] | None, through: datetime
    ) -> None:
        """Move the cursor forward by compare-and-set; never backward."""
        key = names.cron_cursor_key(name)
        value = encode(CronCursor(name=name, through=rfc3339(through), updated_at=now_rfc3339()))
        revision = cursor[1] if cursor else None
        for _ in range(20):
            try:
                if revision is None:
                    await self.cron_kv.create(key, value)
                else:
                    await self.cron_kv.update(key, value, last=revision)
                return
            except KeyWrongLastSequenceError:
                entry = await self.cron_kv.get(key)  # a deleted key's raises: this one has a value
                if parse(cron_cursor_decoder.decode(cast(bytes, entry.value)).through) >= through:
                    return  # another scheduler got as far or further
                revision = entry.revision
        raise RuntimeError(f"cursor of {name} kept changing")


def _concurrency(spec: WorkflowSpec, defaults: dict[str, str], name: str) -> dict[str, Any]:
    """A scheduled run's concurrency fields, its key evaluated as the gateway evaluates a
    trigger's, with the parameters' defaults: registering the workflow checked that it can
    be. A key that fails all the same is logged, and the runs go without it."""
    try:
        return concurrency.submit_fields(spec.concurrency, defaults, name)
    except ExpressionError as exc:
        log.error("workflow %s: its concurrency key: %s; its scheduled runs go without", name, exc)
        return {}
