"""The pool's free runners, looked for among the idle ones (pool.py keeps them by turn),
against a model that scans every registered runner as the rule states it: registered, no
lease, no reservation, not set aside, not suspect now; least recently reserved first. Random
sequences of what a dispatcher does, each checked after every step."""

from __future__ import annotations

import random

import pytest
from heddle.services.dispatcher.pool import Pool
from heddle.shared.wire.contracts import RunnerInfo

NAMES = [f"runner-{i}" for i in range(6)]


def entry(name: str, pid: int, labels: list[str]) -> RunnerInfo:
    return RunnerInfo(
        name=name,
        status="idle",
        pid=pid,
        version="t",
        started_at=str(pid),
        seen_at="",
        pool="gpu" if labels else "default",
        labels=labels,
    )


class Model:
    """What a free runner is, computed from scratch at each look."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.order: list[str] = []  # least recently reserved first
        self.suspect: dict[str, float] = {}

    def free(self, now: float, key: str | None) -> list[str]:
        p = self.pool
        return [
            n
            for n in self.order
            if (key is None or key in p.keys[n])
            and n not in p.leases
            and n not in p.reserved
            and n not in p.set_aside
            and self.suspect.get(n, 0.0) <= now
        ]


class Dispatcher:
    """One random step at a time, applied to the pool and its model."""

    def __init__(self, rng: random.Random, labelled: bool) -> None:
        self.rng, self.labelled = rng, labelled
        self.pool = Pool()
        self.model = Model(self.pool)
        self.now, self.pids, self.step = 0.0, 0, 0
        self.running: list[tuple[str, str]] = []

    def register(self) -> None:
        name = self.rng.choice(NAMES)
        self.pids += self.rng.random() < 0.2 or name not in self.pool.runners
        labels = ["gpu"] if self.labelled and name.endswith(("1", "4")) else []
        self.pool.update(entry(name, self.pids, labels))
        if name not in self.model.order:
            self.model.order.append(name)

    def leave(self) -> None:
        name = self.rng.choice(NAMES)
        self.pool.remove(name)
        if name in self.model.order:
            self.model.order.remove(name)
        self.model.suspect.pop(name, None)
        self.running = [r for r in self.running if r[0] != name]

    def reserve(self, key: str) -> None:
        expected = self.model.free(self.now, key if key or self.labelled else None)
        name = self.pool.reserve(now=self.now, key=key)
        assert name == (expected[0] if expected else None)
        if name is None:
            return
        self.model.order.remove(name)
        self.model.order.append(name)
        self.step += 1
        step = f"s{self.step}"
        match self.rng.random():
            case r if r < 0.6:
                self.pool.accepted(name, "run", step, 1, self.step)
                self.running.append((name, step))
            case r if r < 0.8:
                self.pool.unreserve(name)
            case _:
                silent = self.rng.random() < 0.5
                self.pool.refused(name, silent=silent, now=self.now)
                self.model.suspect[name] = self.now + (self.pool.suspect_for if silent else 0.2)

    def finish(self) -> None:
        if not self.running:
            return
        name, step = self.running.pop(self.rng.randrange(len(self.running)))
        continued = "next" if self.rng.random() < 0.2 else ""
        self.pool.release(name, "run", step, 1, continued=continued)
        if continued:
            self.running.append((name, "next"))
        else:
            self.model.suspect.pop(name, None)

    def act(self) -> None:
        roll = self.rng.random()
        if roll < 0.15:
            self.register()
        elif roll < 0.2:
            self.leave()
        elif roll < 0.55:
            self.reserve("gpu" if self.labelled and self.rng.random() < 0.3 else "")
        elif roll < 0.85:
            self.finish()
        elif roll < 0.9:
            self.pool.set_aside = frozenset() if self.pool.set_aside else {self.rng.choice(NAMES)}
        else:
            self.now += self.rng.choice((0.1, 1.0, 6.0))

    def check(self) -> None:
        pool, now = self.pool, self.now
        everyone = self.model.free(now, None)
        default = self.model.free(now, "" if self.labelled else None)
        assert pool.free(now=now, key=None) == everyone
        assert pool.free(now=now) == default
        assert pool.any_free(now=now) == bool(default)
        counts = pool.free_by_key(now=now)
        if not self.labelled:
            assert counts == {"": len(everyone)}
        else:
            for key in ("", "gpu"):
                assert counts.get(key, 0) == len(self.model.free(now, key))


@pytest.mark.parametrize("seed", range(60))
def test_free_runners_are_those_a_scan_of_the_pool_finds(seed: int) -> None:
    d = Dispatcher(random.Random(seed), labelled=seed % 3 == 0)
    for name in NAMES[:3]:
        d.pool.update(entry(name, 0, []))
        d.model.order.append(name)
    for _ in range(400):
        d.act()
        d.check()
