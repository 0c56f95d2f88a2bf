"""Runner pools with labels through the real services (docs/pools.md): a step with runsOn
runs only on a runner with every label, a step without one never in a named pool, a busy
pool delays no other pool's steps (with two dispatchers), and a step no runner can take
fails after HEDDLE_NO_RUNNER_TIMEOUT, its ready message gone."""

from __future__ import annotations

from tests.support.stack import Stack, StackFactory, eventually, step_of
from tests.support.step_uids import shared_dir

GPU = {"HEDDLE_RUNNER_POOL": "gpu", "HEDDLE_RUNNER_LABELS": "a100"}


async def with_gpu_runner(s: Stack, runners: int) -> None:
    s.start("runner-gpu-0", **GPU)
    await s.wait_ready(runners + 1)


def runner_of(run: dict, step_id: str) -> str:
    return step_of(run, step_id)["attempts"][-1]["runner"]


async def test_a_step_runs_only_on_a_runner_with_its_labels(stack: StackFactory) -> None:
    s = await stack(runners=1)
    await with_gpu_runner(s, 1)
    plain = [{"id": f"p{i}", "command": "sleep 0.2"} for i in range(4)]
    labelled = [
        {"id": "train", "command": "true", "runsOn": ["gpu"]},
        {"id": "a100", "command": "true", "runsOn": ["a100", "gpu"], "dependsOn": ["train"]},
        # After a labelled step: not handed to the GPU runner that just freed up.
        {"id": "after", "command": "true", "dependsOn": ["a100"]},
        {"id": "then", "command": "true", "runsOn": ["gpu"], "dependsOn": ["after"]},
    ]
    run = await s.wait_run(await s.submit({"steps": plain + labelled}))
    assert run["status"] == "succeeded", run
    on = {step["id"]: runner_of(run, step["id"]) for step in plain + labelled}
    assert {on["train"], on["a100"], on["then"]} == {"runner-gpu-0"}, on
    # Four plain steps queued at once, one default runner, a GPU runner free: none on it.
    assert {on[f"p{i}"] for i in range(4)} | {on["after"]} == {"runner-0"}, on
    assert step_of(run, "train")["runsOn"] == ["gpu"]
    _, pool = await s.request("GET", "/api/runners")
    labels = {r["name"]: (r["pool"], r["labels"]) for r in pool["runners"]}
    assert labels == {
        "runner-0": ("default", ["default"]),
        "runner-gpu-0": ("gpu", ["a100", "gpu"]),
    }


async def test_a_busy_pool_does_not_delay_another_pools_steps(stack: StackFactory) -> None:
    s = await stack(runners=1, dispatchers=2)
    await with_gpu_runner(s, 1)
    # The GPU backlog holds its runner until the default pool's run has ended: were its
    # ready steps in the way of the others, that run could never end.
    go = shared_dir() / "go"
    wait = f"while [ ! -e {go} ]; do sleep 0.05; done"
    backlog = [{"id": f"g{i}", "command": wait, "runsOn": ["gpu"]} for i in range(10)]
    big = await s.submit({"steps": backlog})

    async def one_running() -> bool:  # whichever the runner took first
        return any(st["status"] == "running" for st in (await s.run(big))["steps"])

    await eventually(one_running, "a step of the backlog running")
    small = await s.submit({"steps": [{"id": f"d{i}", "command": "true"} for i in range(8)]})
    done = await s.wait_run(small, timeout=30)
    assert done["status"] == "succeeded"
    held = await s.run(big)
    assert sum(st["status"] == "succeeded" for st in held["steps"]) == 0, held
    go.touch()
    gpu = await s.wait_run(big, timeout=30)
    assert gpu["status"] == "succeeded"


async def test_a_step_no_runner_can_take_waits_then_fails(stack: StackFactory) -> None:
    s = await stack(runners=1, HEDDLE_NO_RUNNER_TIMEOUT="1.5", HEDDLE_WATCHDOG_SCAN="0.2")
    run_id = await s.submit(
        {
            "steps": [
                {"id": "tpu", "command": "touch ran", "runsOn": ["tpu"]},
                {"id": "after", "command": "true", "dependsOn": ["tpu"]},
            ]
        }
    )
    run = await s.wait_run(run_id, timeout=20)
    assert run["status"] == "failed", run
    tpu = step_of(run, "tpu")
    assert tpu["status"] == "failed" and "no runner has the labels tpu" in tpu["reason"]
    assert step_of(run, "after")["status"] == "skipped"
    # A runner with the label that joins later is not given the failed step.
    s.start("runner-tpu-0", HEDDLE_RUNNER_POOL="tpu")
    await s.wait_ready(2)
    later = await s.wait_run(
        await s.submit({"steps": [{"id": "t", "command": "true", "runsOn": ["tpu"]}]})
    )
    assert later["status"] == "succeeded" and runner_of(later, "t") == "runner-tpu-0"
    again = await s.run(run_id)
    assert step_of(again, "tpu")["attempts"][-1].get("runner") is None, again
