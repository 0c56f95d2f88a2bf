"""Runner pools restricted to namespaces through the real services (docs/namespaces.md,
"Runner pools for namespaces"): a pool of team-a runs team-a's steps that ask for it, never
another namespace's; a run of another namespace asking for it is refused at submit, and one
that gets past submit fails after HEDDLE_NO_RUNNER_TIMEOUT naming the reason."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import msgspec
from heddle.shared.broker.nats_types import KeyNotFoundError
from heddle.shared.core.namespaces import qualified
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    TERMINAL_RUN,
    StepRecord,
    StepSpec,
    SubmitRun,
    encode,
    run_record_decoder,
    step_record_decoder,
)
from heddle.shared.wire.timefmt import now_rfc3339

from tests.support.namespaces import set_quotas, submit_in
from tests.support.stack import Stack, StackFactory

GPU_OF_TEAM_A = {"HEDDLE_RUNNER_POOL": "gpu", "HEDDLE_POOL_NAMESPACES": "team-a"}
NO_RUNNER_SOON = {"HEDDLE_NO_RUNNER_TIMEOUT": "1.5", "HEDDLE_WATCHDOG_SCAN": "0.2"}


async def publish_past_the_gateway(
    s: Stack, namespace: str, run: str, steps: list[dict[str, Any]]
) -> str:
    """A run of ``namespace`` sent as the gateway's submit command, so it skips the gateway's
    check: as a run submitted just before the registry changed does; its qualified id."""
    run_id = qualified(namespace, run)
    cmd = SubmitRun(
        run_id=run_id,
        steps=[msgspec.convert(step, StepSpec, from_attributes=False) for step in steps],
        submitted_at=now_rfc3339(),
    )
    nc = await s.connect()
    try:
        await nc.jetstream().publish(names.cmd_submit(run_id), encode(cmd))
    finally:
        await nc.close()
    return run_id


async def wait_run_in(s: Stack, run_id: str, step_ids: list[str], timeout: float = 30.0) -> Run:
    """A run of a namespace once it has ended, read from its records under its qualified id:
    its status and the records of ``step_ids``."""
    nc = await s.connect()
    try:
        runs = await nc.jetstream().key_value(names.RUNS_BUCKET)
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(KeyNotFoundError):
                entry = await runs.get(names.run_key(run_id))
                if entry.value and run_record_decoder.decode(entry.value).status in TERMINAL_RUN:
                    break
            assert time.monotonic() < deadline, f"run {run_id} not ended after {timeout}s"
            await asyncio.sleep(0.05)
        status = run_record_decoder.decode(entry.value).status
        steps = {}
        for step_id in step_ids:
            stored = await runs.get(names.step_key(run_id, step_id))
            steps[step_id] = step_record_decoder.decode(stored.value or b"")
        return Run(status, steps)
    finally:
        await nc.close()


@dataclass(frozen=True)
class Run:
    status: str
    steps: dict[str, StepRecord]


async def with_team_a_gpu(s: Stack, runners: int) -> None:
    s.start("runner-gpu-0", **GPU_OF_TEAM_A)
    await s.wait_ready(runners + 1)


async def test_a_namespaced_pool_runs_its_namespaces_steps_alone(stack: StackFactory) -> None:
    s = await stack(runners=1, **NO_RUNNER_SOON)
    await with_team_a_gpu(s, 1)
    steps = [
        {"id": f"g{i}", "command": "true", "runsOn": ["gpu"], "dependsOn": []} for i in range(3)
    ]
    plain = [{"id": "p", "command": "true", "dependsOn": ["g0"]}]
    await set_quotas(s, "team-a")  # the namespace made, with no quota
    ours = await submit_in(s, "team-a", "train", {"steps": steps + plain})
    run = await wait_run_in(s, ours, ["g0", "g1", "g2", "p"])
    assert run.status == "succeeded", run
    assert {run.steps[f"g{i}"].runner for i in range(3)} == {"runner-gpu-0"}
    assert run.steps["p"].runner == "runner-0"  # a step without runsOn: the default pool's
    _, pool = await s.request("GET", "/api/runners")
    served = {r["name"]: r["namespaces"] for r in pool["runners"]}
    assert served == {"runner-0": [], "runner-gpu-0": ["team-a"]}


async def test_another_namespaces_step_is_refused_at_submit(stack: StackFactory) -> None:
    s = await stack(runners=1, **NO_RUNNER_SOON)
    await with_team_a_gpu(s, 1)
    # Runs of team-b and of default asking for gpu: every gpu runner serves team-a alone.
    await set_quotas(s, "team-b")
    steps = [{"id": "ok", "command": "true"}, {"id": "train", "command": "true", "runsOn": ["gpu"]}]
    for namespace in ("team-b", "default"):
        doc = {"namespace": namespace, "steps": steps}
        status, body = await s.request("POST", "/api/runs", json=doc)
        assert status == 400, body
        [problem] = body["problems"]
        assert problem["path"] == "steps[1].runsOn"
        assert problem["message"] == (
            f"step train: pool gpu serves namespace team-a only; this run is in namespace "
            f"{namespace}"
        )


async def test_a_step_past_submit_no_runner_may_take_fails_naming_why(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1, **NO_RUNNER_SOON)
    await with_team_a_gpu(s, 1)
    theirs = await publish_past_the_gateway(
        s,
        "team-b",
        "train",
        [
            {"id": "gpu", "command": "touch ran", "runsOn": ["gpu"]},
            {"id": "plain", "command": "true"},
        ],
    )
    # Behind it in the gpu lane, team-a's steps still reach the gpu runner.
    ours = await publish_past_the_gateway(
        s,
        "team-a",
        "after",
        [{"id": f"g{i}", "command": "true", "runsOn": ["gpu"]} for i in range(8)],
    )
    done = await wait_run_in(s, ours, [f"g{i}" for i in range(8)])
    assert done.status == "succeeded", done
    assert {done.steps[f"g{i}"].runner for i in range(8)} == {"runner-gpu-0"}
    run = await wait_run_in(s, theirs, ["gpu", "plain"], timeout=20)
    assert run.status == "failed", run
    gpu = run.steps["gpu"]
    assert gpu.status == "failed" and gpu.runner is None, gpu  # never on team-a's runner
    assert (gpu.reason or "").startswith(
        "pool gpu serves namespace team-a only; this run is in namespace team-b: "
    ), gpu
    assert run.steps["plain"].status == "succeeded" and run.steps["plain"].runner == "runner-0"
