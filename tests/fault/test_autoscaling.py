"""The dispatcher's autoscaling end to end: a real stack whose dispatcher scales the runner
StatefulSets of a small Kubernetes API server on 127.0.0.1 (tests/support/fake_kube.py) through the
real client. The test plays the StatefulSet controller: a StatefulSet scaled to 1 gets its
runner process started (runner-i, as the chart names a runner after its StatefulSet), one
scaled to 0 has its runner SIGTERMed, as the kubelet stops a pod.

A backlog grows the pool from one runner to four; idle, it shrinks back to one, from the top;
and a runner still running a step is drained (given no new step), never removed until the
step is done."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from heddle.shared.wire.timefmt import parse

from tests.support import fake_kube as fk
from tests.support.metrics import scrape, value
from tests.support.stack import Stack, StackFactory, eventually, step_of, until

RUNNERS = [f"runner-{i}" for i in range(4)]
SCALING = {
    "HEDDLE_AUTOSCALE": "on",
    "HEDDLE_AUTOSCALE_MIN": "1",
    "HEDDLE_AUTOSCALE_MAX": "4",
    "HEDDLE_AUTOSCALE_UP_AFTER": "0.5",
    # Longer than a loaded machine takes from the runners' joining to the first submit: the
    # premise of four free runners holds only if none was drained before it.
    "HEDDLE_AUTOSCALE_IDLE_AFTER": "4",
    "HEDDLE_AUTOSCALE_INTERVAL": "0.2",
    "HEDDLE_AUTOSCALE_START_TIMEOUT": "20",
    "HEDDLE_POD_WATCH": "off",
}


@pytest.fixture
async def api() -> AsyncIterator[fk.FakeKube]:
    server = await fk.FakeKube().start()
    yield server
    await server.stop()


class Controller:
    """The StatefulSet controller and the kubelet, for runner processes."""

    def __init__(self, api: fk.FakeKube) -> None:
        self.s: Stack | None = None
        self.changes: list[tuple[float, str, int]] = []  # wall clock, runner, replicas
        api.on_scale = self.scaled

    async def scaled(self, name: str, was: int, now: int) -> None:
        self.changes.append((time.time(), name, now))
        assert self.s is not None
        if now and not was:
            self.s.start(name)
        elif was and not now:
            self.s.kill(name, signal.SIGTERM)


async def test_a_busy_top_runner_is_drained_and_an_idle_pool_shrinks_from_the_top(
    stack: StackFactory, api: fk.FakeKube, tmp_path: Path
) -> None:
    api.statefulsets = dict.fromkeys(RUNNERS, 1)
    controller = Controller(api)
    s = await stack(
        runners=4,
        metrics=True,
        HEDDLE_KUBECONFIG=str(api.kubeconfig(tmp_path / "kubeconfig")),
        **SCALING,
    )
    controller.s = s
    assert '"msg":"autoscale"' not in s.logs("dispatcher"), "the pool moved before the test"

    # The dispatcher's own view (the gateway may list a runner a moment before it has it):
    # a step placed meanwhile would go to the next ordinal up.
    async def pooled() -> bool:
        return value(await scrape(s, "dispatcher"), "heddle_runners") == len(RUNNERS)

    await eventually(pooled, "the dispatcher saw every runner", timeout=10)
    # Four free runners: three short steps go to the three lowest ordinals, in whatever
    # order the dispatcher places them (a redelivered message is looked for first, and
    # those looks end in any order); a long one then goes to the lowest free, the top
    # runner. Once the short ones are done and their runners idle for IDLE_AFTER, runners
    # 1-3 are drained; runner 3 is busy, so nothing is removed until its step is done,
    # then the pool goes to one runner, from the top.
    short = await s.submit({"steps": [{"id": f"short{i}", "command": "sleep 3"} for i in range(3)]})
    for i in range(3):
        await s.wait_step(short, f"short{i}", {"running"}, timeout=10)
    one_long = await s.submit({"steps": [{"id": "long", "command": "sleep 10"}]})
    run = await s.wait_run(one_long, timeout=30)
    assert run["status"] == "succeeded", run
    shorts = await s.wait_run(short, timeout=30)
    assert shorts["status"] == "succeeded", shorts
    long = step_of(run, "long")
    placed = [(step["id"], step["runner"]) for step in shorts["steps"] + run["steps"]]
    assert long["runner"] == "runner-3", placed
    await until(lambda: scale(api) == [1, 0, 0, 0], 15, f"not scaled down: {api.scaled}")
    downs = [(t, name) for t, name, replicas in controller.changes if replicas == 0]
    assert [name for _, name in downs] == ["runner-3", "runner-2", "runner-1"], downs
    assert downs[0][0] >= stamp(long["finishedAt"]), (downs, long)
    log = s.logs("dispatcher")
    decisions = [json.loads(line) for line in log.splitlines() if '"msg":"autoscale"' in line]
    # Drained (maybe in more than one look) while its step ran; then removed, all at once.
    assert [d["draining"] for d in decisions if d["decision"] == "drain"][-1] == [1, 2, 3]
    assert [(d["decision"], d["replicas"]) for d in decisions][-1] == ("down", 1), decisions
    assert_never_removed_busy(controller, shorts["steps"] + run["steps"])

    # A backlog on the one runner left: four steps of 3 s. Once a step has waited
    # UP_AFTER with every runner busy, the pool grows by the steps waiting; the new runners
    # take them, and once idle the pool shrinks again, from the top.
    controller.changes.clear()
    submitted = time.time()
    backlog = await s.submit({"steps": [{"id": f"s{i}", "command": "sleep 3"} for i in range(4)]})
    await until(lambda: scale(api) == [1, 1, 1, 1], 10, f"not scaled up: {api.scaled}")
    grown = controller.changes[-1][0]
    run = await s.wait_run(backlog, timeout=30)
    assert run["status"] == "succeeded", run
    assert len({step["runner"] for step in run["steps"]}) >= 2, run["steps"]
    await until(lambda: scale(api) == [1, 0, 0, 0], 20, f"not scaled down: {api.scaled}")
    assert_never_removed_busy(controller, run["steps"])
    print(f"\nbacklog -> the pool at 4 runners: {grown - submitted:.2f} s (UP_AFTER 0.5 s)")

    log = s.logs("dispatcher")
    assert '"decision":"up"' in log and '"decision":"down"' in log, log[-3000:]
    # The gauge is set once the last patch is answered, a moment after the API applied it.
    deadline = time.monotonic() + 5
    while "heddle_autoscale_replicas 1.0" not in (metrics := await metrics_of(s)):
        assert time.monotonic() < deadline, metrics
        await asyncio.sleep(0.05)
    assert 'heddle_autoscale_decisions_total{decision="up"} 1.0' in metrics, metrics
    assert 'heddle_autoscale_decisions_total{decision="drain"}' in metrics, metrics


def scale(api: fk.FakeKube) -> list[int]:
    return [api.statefulsets[n] for n in RUNNERS]


def assert_never_removed_busy(controller: Controller, steps: list[dict[str, Any]]) -> None:
    """No step was running on a runner when its StatefulSet went to 0, and each went from
    the top: the highest ordinal still at 1."""
    up = {name for name in RUNNERS}
    for t, name, replicas in sorted(controller.changes):
        if replicas:
            up.add(name)
            continue
        assert name == max(up, key=lambda n: int(n.rsplit("-", 1)[1])), (name, up)
        up.discard(name)
        for step in steps:
            if step["runner"] == name:
                began, ended = stamp(step["startedAt"]), stamp(step["finishedAt"])
                assert not began <= t <= ended, (name, t, step)


def stamp(text: str) -> float:
    return parse(text).timestamp()


async def metrics_of(s: Stack) -> str:
    session = await s.http()
    async with session.get(f"http://127.0.0.1:{s.metrics_ports['dispatcher']}/metrics") as r:
        return await r.text()
