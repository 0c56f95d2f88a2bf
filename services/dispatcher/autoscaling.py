"""The dispatcher's autoscaling (``HEDDLE_AUTOSCALE=on``): every ``HEDDLE_AUTOSCALE_INTERVAL`` it
shows autoscale.py (pure) each scaled pool and the ready steps waiting for it, and applies the
decision to that pool's runner StatefulSets' scale subresource through shared/kube/client.py.

The chart runs one single-replica StatefulSet per runner (each runner its own NATS user, see
deploy/README.md), ``<prefix>0 ... <prefix><max-1>`` for each pool; runner ``<prefix>i`` is
ordinal ``i`` of its pool, and "replicas n" means the StatefulSets of ordinals below n at 1 and
the others at 0: one StatefulSet's ordinals, spread over one StatefulSet per ordinal. Each pool
with autoscaling (``HEDDLE_RUNNER_POOLS``; none listed: the default pool alone, as
``HEDDLE_AUTOSCALE_*`` say) has a ``PoolScaler`` of its own, fed by ``demand(pool)``: the waits
of the steps in hand its runners could take, and the steps the stream still holds for it. The
dispatcher is the one that leases runners, so a drained runner is set aside in the same process
that would lease it (``Pool.set_aside`` asks ``__contains__`` here): no message, no race.
Runners of no scaled pool are leased as ever and never scaled.

An API that cannot be reached changes nothing: the decision is logged as failed, the runners
to be removed stay drained, and the next look tries again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from heddle.services.dispatcher.autoscale import (
    Decision,
    Limits,
    Runner,
    Scaled,
    View,
    decide,
    ordinal_of,
    pack_key,
    pool_members,
    scaled_pools,
    waiting_of,
)
from heddle.services.dispatcher.pool import Pool
from heddle.shared.core.runner_pools import parse_pools
from heddle.shared.kube import client as kube
from heddle.shared.runtime.metrics import AUTOSCALE_DECISIONS, AUTOSCALE_REPLICAS, child
from heddle.shared.runtime.periodic import Periodic
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings

log = logging.getLogger("heddle.dispatcher")
RESYNC = 60.0  # seconds between two reads of every StatefulSet's replicas
# A pool's demand: the seconds each ready step in hand that its runners could take has waited,
# and the ready steps the stream still holds for it (None: not known).
Demand = Callable[[str], tuple[tuple[float, ...], int | None]]


def pools_scaled(settings: Settings) -> tuple[Scaled, ...]:
    """The pools the dispatcher scales, from its settings."""
    limits = Limits(
        minimum=settings.autoscale_min,
        maximum=settings.autoscale_max,
        up_after=settings.autoscale_up_after,
        idle_after=settings.autoscale_idle_after,
        start_timeout=settings.autoscale_start_timeout,
    )
    pools = parse_pools(settings.runner_pools)
    return scaled_pools(pools, limits, settings.runner_statefulset_prefix)


def packing(settings: Settings) -> Callable[[str], float]:
    """``Pool.pack`` for autoscaling: steps go to the lowest ordinals of each pool."""
    prefixes = [s.prefix for s in pools_scaled(settings)]
    return lambda name: pack_key(name, prefixes)


class Autoscaling:
    """Every scaled pool's scaler, looked at in one loop."""

    def __init__(
        self,
        settings: Settings,
        pool: Pool,
        demand: Demand,
        changed: Callable[[], Awaitable[None]],
        refresh: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.demand = demand
        self.refresh = refresh  # brings the backlog demand() reports up to date
        self.scalers = [PoolScaler(s, pool, changed) for s in pools_scaled(settings)]
        self._job = Periodic("autoscaling", settings.autoscale_interval, self.tick, log)

    # ---- Pool.set_aside ----

    def __contains__(self, name: object) -> bool:
        return any(name in s for s in self.scalers)

    # ---- running ----

    async def start(self) -> None:
        api, namespace = await kube.open_api(self.settings.kubeconfig)
        namespace = self.settings.kube_namespace or namespace
        scales = kube.Scales(api, namespace)
        for scaler in self.scalers:
            scaler.start(scales)
        self.pool.set_aside = self
        self._job.start()
        event(
            log,
            "autoscaling started",
            namespace=namespace,
            statefulsets=", ".join(s.describe() for s in self.scalers),
        )

    async def stop(self) -> None:
        await self._job.stop()
        AUTOSCALE_REPLICAS.set(0)

    async def tick(self, now: float | None = None) -> dict[str, Decision | None]:
        """One look at every pool: its decision, by pool name (None: not read)."""
        demands = {s.pool_name: self.demand(s.pool_name) for s in self.scalers}
        if self.refresh is not None and any(waits for waits, _ in demands.values()):
            await self.refresh()
            demands = {s.pool_name: self.demand(s.pool_name) for s in self.scalers}
        decisions = {}
        for scaler in self.scalers:
            waits, pending = demands[scaler.pool_name]
            decisions[scaler.pool_name] = await scaler.tick(waits, pending, now)
        AUTOSCALE_REPLICAS.set(sum(s.replicas or 0 for s in self.scalers))
        return decisions


class PoolScaler:
    """One pool's StatefulSets, scaled from its own demand."""

    def __init__(self, scaled: Scaled, pool: Pool, changed: Callable[[], Awaitable[None]]) -> None:
        self.pool_name = scaled.pool
        self.prefix = scaled.prefix
        self.limits = scaled.limits
        self.pool = pool
        self.changed = changed  # runners may have been set aside or taken back
        self.scales: kube.Scales | None = None
        self.replicas: int | None = None  # None until the StatefulSets have been read
        self.leaving = 0  # during a scale-down: ordinals at or above this are set aside
        self.draining: frozenset[int] = frozenset()
        self.live: dict[int, int] = {}  # each StatefulSet's replicas as last read or set
        self._mark: dict[int, float] = {}  # ordinal -> when last busy, asked for, came or left
        self._registered: dict[int, bool] = {}
        self._started = time.monotonic()
        self._synced = 0.0

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or self.replicas is None:
            return False
        o = ordinal_of(name, self.prefix)
        if o is None:
            return False
        return o >= min(self.replicas, self.leaving) or o in self.draining

    def start(self, scales: kube.Scales) -> None:
        self.scales = scales
        self._started = time.monotonic()

    def describe(self) -> str:
        return (
            f"{self.pool_name}: {self.prefix}0..{self.prefix}{self.limits.maximum - 1} "
            f"({self.limits.minimum}-{self.limits.maximum})"
        )

    def name(self, ordinal: int) -> str:
        return f"{self.prefix}{ordinal}"

    async def sync(self) -> None:
        """Read every StatefulSet's replicas: the pool wants the ordinals up to the highest
        one at 1 (a StatefulSet missing counts as 0)."""
        assert self.scales is not None
        live = {}
        for o in range(self.limits.maximum):
            try:
                live[o] = await self.scales.get(self.name(o))
            except kube.KubeError as exc:
                if "404" not in str(exc):
                    raise
                live[o] = 0
        self.live = live
        replicas = max((o + 1 for o, r in live.items() if r > 0), default=0)
        if replicas != self.replicas:
            event(
                log,
                "autoscaling read the pool",
                pool=self.pool_name,
                replicas=replicas,
                was=self.replicas,
            )
        self.replicas = self.leaving = replicas
        self._synced = time.monotonic()

    async def tick(
        self, waits: tuple[float, ...], pending: int | None, now: float | None = None
    ) -> Decision | None:
        if self.replicas is None or time.monotonic() - self._synced > RESYNC:
            try:
                await self.sync()
            except kube.KubeError as exc:
                log.warning(
                    "autoscaling: the runner StatefulSets of pool %s not read (%s)",
                    self.pool_name,
                    exc,
                )
                return None
        now = time.monotonic() if now is None else now
        view = View(
            replicas=self.replicas or 0,
            runners=self._runners(now),
            waits=waits,
            waiting=waiting_of(waits, pending),
            draining=self.draining,
        )
        decision = decide(view, self.limits, now)
        if decision.action == "hold":
            self.draining = decision.draining
            return decision
        await self._apply(view, decision)
        return decision

    def _runners(self, now: float) -> tuple[Runner, ...]:
        assert self.replicas is not None
        registered = pool_members(self.pool.runners, self.prefix)
        out = []
        for o in range(max(self.replicas, max(registered, default=-1) + 1)):
            name = registered.get(o)
            busy = name is not None and self.pool.busy(name)
            if busy or self._registered.get(o) != (name is not None):
                self._mark[o] = now
            self._registered[o] = name is not None
            since = max(
                self._mark.get(o, self._started),
                self.pool.reserved_at.get(name, 0.0) if name else 0.0,
            )
            out.append(Runner(o, registered=name is not None, busy=busy, since=since))
        return tuple(out)

    async def _apply(self, view: View, d: Decision) -> None:
        was = view.replicas
        busy = sum(r.busy for r in view.runners)
        event(
            log,
            "autoscale",
            pool=self.pool_name,
            decision=d.action,
            replicas=d.replicas,
            was=was,
            draining=sorted(d.draining),
            waiting=view.waiting,
            oldest_wait=round(max(view.waits, default=0.0), 3),
            busy=busy,
            reason=d.reason,
        )
        child(AUTOSCALE_DECISIONS, d.action).inc()
        if not d.changes_scale:
            self.draining = d.draining
            await self.changed()
            return
        # Set aside first: no step goes to a runner being removed while the API is asked.
        self.leaving = min(was, d.replicas)
        self.draining = d.draining
        done = was
        try:
            if d.replicas > was:
                for o in range(d.replicas):
                    await self._set(o, 1)
                    done = max(done, o + 1)
            else:
                for o in reversed(range(d.replicas, was)):
                    await self._set(o, 0)
                    done = o
        except kube.KubeError as exc:
            child(AUTOSCALE_DECISIONS, "failed").inc()
            log.warning(
                "autoscaling: %s; pool %s stays at %d runners for now", exc, self.pool_name, done
            )
            # Ordinals that were to go and did not stay drained: the next look goes on.
            self.draining = d.draining | frozenset(range(min(done, d.replicas), done))
        self.replicas = self.leaving = done
        now = time.monotonic()
        for o in range(was, done):  # asked for: coming, and idle from now
            self._mark[o] = now
            self._registered[o] = False
        await self.changed()

    async def _set(self, o: int, replicas: int) -> None:
        assert self.scales is not None
        if self.live.get(o) == replicas:
            return
        self.live[o] = await self.scales.set(self.name(o), replicas)
