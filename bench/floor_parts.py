"""The parts of bench/floor.py, each run as its own process, as Heddle's services are:
``python -m bench.floor_parts PART NATS_URL COUNT LANES``, printing one JSON line.

- ``spawn``: COUNT steps of ``true``, LANES at a time (step uids from ``FIRST_UID`` plus the
  fifth argument), each through Heddle's own spawn path
  (``StepProcess`` with the step launcher and a fresh working directory, as a runner does
  for a step of a step user; as the process's own user where it is not root). Prints the
  launchers' CPU and that of the commands they reaped.
- ``publish``: COUNT JetStream publishes to ``floor.evt.N`` with a message id, LANES at a
  time, each awaited (``AckedPublisher``), as a runner stores an outcome.
- ``put``: the same to keys of a bucket, each written twice, as the orchestrator records a
  step's state.
- ``consume``: COUNT messages of ``FLOOR_EVENTS`` pulled in batches and acknowledged one by
  one, as the orchestrator takes outcomes and a dispatcher ready steps.
- ``send`` and ``hear``: COUNT core messages, as an offer or the live copy of an outcome.

Each prints its own CPU seconds (``cpu_s``) once its work is done.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
from typing import Any

import nats
import uvloop
from heddle.services.runner_agent.isolation import StepUser
from heddle.services.runner_agent.launcher import Launcher
from heddle.services.runner_agent.process import StepProcess
from heddle.services.runner_agent.workdir import Workdir
from heddle.shared.broker.acked import AckedPublisher

from bench.procfs import CLK_TCK

STREAM, SUBJECTS, CONSUMER, BUCKET = "FLOOR_EVENTS", "floor.evt.>", "floor", "FLOOR"
# About a fan-out step's outcome or record as Heddle encodes it.
PAYLOAD = b'{"runId":"r-0123456789abcdef","stepId":"s0001","attempt":1,' + b"x" * 220 + b"}"
FIRST_UID = 61000  # step uids of the spawn part's launchers (outside bench/step_uids.py's)


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree_cpu(pid: int) -> tuple[float, float]:
    """A process's own CPU seconds and those of the children it reaped."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / CLK_TCK
    reaped = (int(fields[13]) + int(fields[14])) / CLK_TCK
    return own, reaped


async def spawn(count: int, lanes: int, first_uid: int) -> dict[str, Any]:
    root = os.geteuid() == 0
    env = {"PATH": "/usr/bin:/bin"}
    launchers: list[Launcher | None] = []
    users: list[StepUser | None] = []
    for lane in range(lanes):
        uid = first_uid + lane
        users.append(StepUser(str(uid), uid, uid, "/nonexistent", True) if root else None)
        launchers.append(Launcher(uid, uid, sweep=True) if root else None)

    async def lane(n: int, run_as: StepUser | None, launcher: Launcher | None) -> None:
        for _ in range(n):
            workdir = Workdir(run_as)
            process = StepProcess(
                "true", env, None, 5.0, 4096, run_as=run_as, launcher=launcher, cwd=workdir.path
            )
            process.start()
            result = await process.wait()
            await workdir.remove(launcher)
            if result.outcome != "succeeded":
                raise RuntimeError(f"a step failed: {result.reason}")

    for launcher in launchers:  # started before the clock: a runner starts its own once
        if launcher is not None:
            launcher.start()
    before = own_cpu()
    each = count // lanes
    await asyncio.gather(*(lane(each, u, la) for u, la in zip(users, launchers, strict=True)))
    cpu = own_cpu() - before
    launched = [tree_cpu(la.pid) for la in launchers if la is not None and la.pid]
    for launcher in launchers:
        if launcher is not None:
            launcher.close()
    return {
        "cpu_s": cpu,
        "steps": count // lanes * lanes,
        "step_user": root,
        "launchers_cpu_s": sum(own for own, _ in launched),
        "commands_cpu_s": sum(reaped for _, reaped in launched),
    }


async def publish(url: str, count: int, lanes: int, record: bool = False) -> dict[str, Any]:
    """Events carry a message id, as the outcome and the ready message do (a second copy is
    dropped); records go to a bucket, each key written twice (queued, then succeeded)."""
    nc = await nats.connect(url)
    acked = await AckedPublisher(nc).start()
    each, token = count // lanes, os.urandom(4).hex()

    async def lane(i: int) -> None:
        for n in range(each):
            if record:
                future = await acked.publish(f"$KV.{BUCKET}.step.{i}.{n // 2}", PAYLOAD)
            else:
                msg_id = {"Nats-Msg-Id": f"{token}.{i}.{n}"}
                future = await acked.publish(f"floor.evt.{i}", PAYLOAD, headers=msg_id)
            await future

    before = own_cpu()
    await asyncio.gather(*(lane(i) for i in range(lanes)))
    cpu = own_cpu() - before
    await nc.close()
    return {"cpu_s": cpu, "messages": each * lanes}


async def consume(url: str, count: int) -> dict[str, Any]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe(SUBJECTS, durable=CONSUMER, stream=STREAM)
    print(json.dumps({"ready": True}), flush=True)
    got, before = 0, None
    while got < count:
        try:
            batch = await sub.fetch(64, timeout=5)
        except nats.errors.TimeoutError:
            break
        if before is None:
            before = own_cpu()
        for msg in batch:
            await msg.ack()
        got += len(batch)
    cpu = own_cpu() - (before if before is not None else own_cpu())
    await nc.close()
    return {"cpu_s": cpu, "messages": got}


async def send(url: str, count: int, lanes: int) -> dict[str, Any]:
    nc = await nats.connect(url)
    before = own_cpu()
    for n in range(count):
        await nc.publish(f"floor.offer.{n % lanes}", PAYLOAD)
        if n % lanes == lanes - 1:
            await asyncio.sleep(0)  # a round of offers, then the loop turns, as in a service
    await nc.flush()
    cpu = own_cpu() - before
    await nc.close()
    return {"cpu_s": cpu, "messages": count}


async def hear(url: str, count: int) -> dict[str, Any]:
    nc = await nats.connect(url)
    done = asyncio.Event()
    got = 0
    started: list[float] = []

    async def heard(_msg: Any) -> None:
        nonlocal got
        if not started:
            started.append(own_cpu())
        got += 1
        if got >= count:
            done.set()

    await nc.subscribe("floor.offer.*", cb=heard)
    await nc.flush()
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.wait_for(done.wait(), 60)
    cpu = own_cpu() - started[0]
    await nc.close()
    return {"cpu_s": cpu, "messages": got}


async def main(argv: list[str]) -> dict[str, Any]:
    part, url, count, lanes = argv[0], argv[1], int(argv[2]), int(argv[3])
    if part == "spawn":  # the 5th argument: this process's first step uid, past FIRST_UID
        return await spawn(count, lanes, FIRST_UID + int(argv[4] if argv[4:] else 0))
    if part in ("publish", "put"):
        return await publish(url, count, lanes, record=part == "put")
    if part == "consume":
        return await consume(url, count)
    if part == "send":
        return await send(url, count, lanes)
    if part == "hear":
        return await hear(url, count)
    raise SystemExit(f"unknown part {part!r}: spawn, publish, put, consume, send or hear")


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:  # as the services run
        print(json.dumps(runner.run(main(sys.argv[1:]))), flush=True)
