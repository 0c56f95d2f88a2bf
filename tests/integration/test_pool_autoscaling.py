"""services/dispatcher/autoscaling.py with runner pools: the real loop and kubernetes client
against a small API server on 127.0.0.1 (tests/support/fake_kube.py), two pools with
autoscaling and one without (HEDDLE_RUNNER_POOLS), each pool's demand given as the dispatcher
gives it. Each pool is scaled on its own StatefulSets from its own demand and runners; the pool
without autoscaling is never touched."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from heddle.services.dispatcher.autoscaling import Autoscaling, packing
from heddle.services.dispatcher.pool import Pool
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire.contracts import RunnerInfo

from tests.support import fake_kube as fk
from tests.support.loop_pause import longest_pause
from tests.support.stack import until

POOLS = [
    {"name": "default", "statefulset": "runner-", "minReplicas": 1, "maxReplicas": 1},
    {
        "name": "gpu",
        "labels": ["cuda"],
        "statefulset": "runner-gpu-",
        "minReplicas": 0,
        "maxReplicas": 3,
        "autoscaling": True,
    },
    {
        "name": "arm",
        "statefulset": "runner-arm-",
        "minReplicas": 1,
        "maxReplicas": 2,
        "autoscaling": True,
    },
]


@pytest.fixture
async def api() -> AsyncIterator[fk.FakeKube]:
    server = await fk.FakeKube().start()
    yield server
    await server.stop()


def registered(name: str) -> RunnerInfo:
    return RunnerInfo(name=name, status="idle", pid=1, version="t", started_at="t", seen_at="t")


def scale(api: fk.FakeKube, prefix: str, count: int) -> list[int]:
    return [api.statefulsets[f"{prefix}{i}"] for i in range(count)]


async def test_two_pools_each_scale_on_their_own_demand(api: fk.FakeKube, tmp_path: Path) -> None:
    api.statefulsets = {
        "runner-0": 1,
        **{f"runner-gpu-{i}": 0 for i in range(3)},
        **{f"runner-arm-{i}": 1 for i in range(2)},
    }
    settings = Settings.from_env(
        {
            "HEDDLE_AUTOSCALE": "on",
            "HEDDLE_RUNNER_POOLS": json.dumps(POOLS),
            "HEDDLE_KUBECONFIG": str(api.kubeconfig(tmp_path / "kubeconfig")),
            "HEDDLE_AUTOSCALE_UP_AFTER": "0.5",
            "HEDDLE_AUTOSCALE_IDLE_AFTER": "1",
            "HEDDLE_AUTOSCALE_START_TIMEOUT": "30",
            "HEDDLE_AUTOSCALE_INTERVAL": "0.05",
        }
    )
    pool = Pool(pack=packing(settings))
    for name in ("runner-0", "runner-arm-0", "runner-arm-1"):
        pool.update(registered(name))
    # Two gpu steps in hand have waited 5 s and one more is in the stream; the default pool
    # has a backlog too, but it does not scale; arm has nothing to do.
    demands = {"default": ((9.0,), 4), "gpu": ((5.0, 5.0), None), "arm": ((), 7)}
    asked: list[str] = []
    refreshed = []

    def demand(name: str) -> tuple[tuple[float, ...], int | None]:
        asked.append(name)
        return demands[name]

    async def refresh() -> None:
        refreshed.append(True)
        demands["gpu"] = ((5.0, 5.0), 1)

    async def changed() -> None:
        pass

    autoscaling = Autoscaling(settings, pool, demand, changed, refresh=refresh)
    await autoscaling.start()
    try:
        # gpu: three steps waiting, every runner busy (it has none): up to three at once.
        await until(lambda: scale(api, "runner-gpu-", 3) == [1, 1, 1], 5, f"{api.scaled}")
        # arm: idle past IDLE_AFTER, down to its minimum, from the top.
        await until(lambda: scale(api, "runner-arm-", 2) == [1, 0], 10, f"{api.scaled}")
    finally:
        await autoscaling.stop()
    assert {name for _, name, _ in api.scaled} == {
        "runner-gpu-0",
        "runner-gpu-1",
        "runner-gpu-2",
        "runner-arm-1",
    }
    assert set(asked) == {"gpu", "arm"}  # a pool without autoscaling is not asked
    assert refreshed  # the backlog is brought up to date when steps wait
    # The removed arm runner gets no step; the others of every pool may.
    assert "runner-arm-1" in autoscaling
    assert not any(n in autoscaling for n in ("runner-0", "runner-arm-0", "runner-gpu-0"))
    assert pool.free() == ["runner-0", "runner-arm-0"]


async def test_autoscaling_starts_while_the_dispatchers_loop_goes_on(
    api: fk.FakeKube, tmp_path: Path
) -> None:
    # A dispatcher whose loop stood still lets go of the ready messages it held meanwhile
    # (shared/runtime/stalls.py): opening the API, with a credential plugin that takes 2 s,
    # must not hold it up.
    api.statefulsets = {"runner-0": 1}
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig", credential_delay=2.0)
    settings = Settings.from_env({"HEDDLE_AUTOSCALE": "on", "HEDDLE_KUBECONFIG": str(kubeconfig)})

    async def nothing() -> None:
        pass

    autoscaling = Autoscaling(settings, Pool(), lambda _: ((), 0), nothing, refresh=nothing)
    _, pause = await longest_pause(autoscaling.start())
    try:
        assert pause < 1.0, f"the loop stood still for {pause:.2f} s"
        # Started on the plugin's token: it reads the pool's StatefulSets.
        await until(lambda: bool(api.requests), 5, "the API was never asked")
        assert api.unauthorized == 0
    finally:
        await autoscaling.stop()
