"""What registered workflows add to the orchestrator, behind one object so that the
orchestrator needs only a few hooks: the run history index (fed by the effect runner), the cron
scheduler and the retention sweep (these two on the holder of partition 0: partitions.py),
and the store's keeper, which measures on every orchestrator and purges logs for room on
that one (store_keeper.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from heddle.services.orchestrator.effects import EffectRunner
from heddle.services.orchestrator.history import RecordingEffects, RunHistory
from heddle.services.orchestrator.retention import Retention
from heddle.services.orchestrator.scheduler import Clock, ScaledClock, Scheduler, WallClock
from heddle.services.orchestrator.state import RunState
from heddle.services.orchestrator.store_keeper import StoreKeeper
from heddle.shared.broker.resources import Resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names


class _Actor(Protocol):
    state: RunState


def clock_for(settings: Settings) -> Clock:
    if settings.cron_time_scale != 1.0:
        return ScaledClock(settings.cron_time_scale)
    return WallClock()


class WorkflowFeatures:
    def __init__(
        self,
        settings: Settings,
        res: Resources,
        actors: Mapping[str, _Actor],
        effects: EffectRunner,
        keeper: StoreKeeper | None = None,
    ) -> None:
        self.keeper = keeper
        runs_kv = res.kv[names.RUNS_BUCKET]

        def live_state(run_id: str) -> RunState | None:
            actor = actors.get(run_id)
            return actor.state if actor is not None else None

        self.history = RunHistory(res.js, runs_kv, live_state)
        self.effects = RecordingEffects(effects, self.history)
        self.scheduler = Scheduler(
            res.js,
            res.kv[names.WORKFLOWS_BUCKET],
            res.kv[names.CRON_BUCKET],
            clock=clock_for(settings),
            backfill=settings.cron_backfill,
            interval=settings.cron_tick,
            room=keeper.admits_new_run if keeper is not None else lambda: True,
        )
        self.retention = Retention(
            res.js,
            runs_kv,
            keep_runs=settings.retention_runs,
            keep_age=settings.retention_age,
            interval=settings.retention_interval,
            is_live=lambda run_id: run_id in actors,
            notifications=res.kv[names.NOTIFICATIONS_BUCKET],
        )
        self.leading = False

    def start(self) -> None:
        """Start writing the run history (every orchestrator writes its own runs')."""
        self.history.start()
        if self.keeper is not None:
            self.keeper.start()

    async def lead(self) -> None:
        """Start scheduling and retention: this orchestrator holds partition 0, and one
        orchestrator alone runs them."""
        if not self.leading:
            self.leading = True
            if self.keeper is not None:
                self.keeper.leading = True
            await self.scheduler.start()
            await self.retention.start()

    async def follow(self) -> None:
        if self.leading:
            self.leading = False
            if self.keeper is not None:
                self.keeper.leading = False
            await self.scheduler.stop()
            await self.retention.stop()

    async def stop(self) -> None:
        """Stop scheduling and retention, then write the history still pending."""
        await self.follow()
        if self.keeper is not None:
            await self.keeper.stop()
        await self.history.stop()
