"""The parts of bench/floor.py, each run as its own process, as Heddle's services are:
``python -m bench.floor_parts PART NATS_URL COUNT LANES [ARG]``, printing one JSON line.

Each connects as the NATS user in ``FLOOR_USER`` (password ``FLOOR_PASSWORD``): a runner's
own user, in the runners' account, for what a runner does; else a user of the services'
account. Subjects, streams and buckets are Heddle's own (shared/wire/names.py), for the run
in ``FLOOR_RUN``.

- ``spawn``: COUNT steps of ``true``, LANES at a time (step uids from ``FLOOR_FIRST_UID`` plus
  ARG: a block bench/step_uids.py holds for the floor),
  each through Heddle's own spawn path (``StepProcess`` with the step launcher and a fresh
  working directory, as a runner does for a step of a step user; as the process's own user
  where it is not root). Prints the launchers' CPU and that of the commands they reaped.
- ``publish``: COUNT JetStream publishes with a message id, LANES at a time, each awaited
  (``AckedPublisher``): a runner's outcomes (ARG: the runner's name) or ready messages
  (ARG: ``ready``).
- ``put``: the same to the step keys of ``heddle-runs``, each written twice (queued, then
  succeeded), as the orchestrator records a step's state.
- ``consume``: COUNT messages of the stream ARG pulled in batches through its ``floor``
  consumer and acknowledged one by one, as the orchestrator takes outcomes and a dispatcher
  ready steps.
- ``send``: COUNT offers to the runners ``runner-0`` to ``runner-<LANES-1>`` in turn.
- ``hear``: COUNT core messages on the subject ARG: a runner's offers, or the outcomes'
  live copies the dispatcher hears.

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
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.wire import names

from bench.procfs import cpu_seconds

CONSUMER = "floor"
# About a fan-out step's outcome or record as Heddle encodes it.
PAYLOAD = b'{"runId":"r-0123456789abcdef","stepId":"s0001","attempt":1,' + b"x" * 220 + b"}"


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def connect(url: str) -> nats.NATS:
    user = os.environ["FLOOR_USER"]
    return await nats.connect(
        url,
        user=user,
        password=os.environ["FLOOR_PASSWORD"],
        inbox_prefix=perms.inbox_prefix(user),
    )


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
    launched = [cpu_seconds(la.pid) for la in launchers if la is not None and la.pid]
    for launcher in launchers:
        if launcher is not None:
            launcher.close()
    return {
        "cpu_s": cpu,
        "steps": each * lanes,
        "step_user": root,
        "launchers_cpu_s": sum(own for own, _ in launched),
        "commands_cpu_s": sum(reaped for _, reaped in launched),
    }


def subject_of(what: str, run: str, step: str) -> tuple[str, dict[str, str] | None]:
    """Where a publish of ``what`` goes for ``step``, and its headers: an outcome of runner
    ``what`` or a ready message, each with its message id (a second copy is dropped), or a
    step's record."""
    if what == "record":
        return names.kv_subject(names.RUNS_BUCKET, names.step_key(run, step)), None
    if what == "ready":
        msg_id = names.ready_msg_id(run, step, 1, 0)
        return names.step_ready(run, step, opens=True), {"Nats-Msg-Id": msg_id}
    msg_id = names.event_msg_id("finished", run, step, 1, what)
    return names.evt(run, step, "finished", what), {"Nats-Msg-Id": msg_id}


async def publish(url: str, count: int, lanes: int, what: str) -> dict[str, Any]:
    nc = await connect(url)
    acked = await AckedPublisher(nc).start()
    run, each, token = os.environ["FLOOR_RUN"], count // lanes, os.urandom(3).hex()

    async def lane(i: int) -> None:
        for n in range(each):
            # A record's key is written twice; every event is a new step's.
            step = f"s{token}{i}x{n // 2}" if what == "record" else f"s{token}{i}x{n}"
            subject, headers = subject_of(what, run, step)
            await (await acked.publish(subject, PAYLOAD, headers=headers))

    before = own_cpu()
    await asyncio.gather(*(lane(i) for i in range(lanes)))
    cpu = own_cpu() - before
    await nc.close()
    return {"cpu_s": cpu, "messages": each * lanes}


async def consume(url: str, count: int, stream: str) -> dict[str, Any]:
    nc = await connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe_bind(CONSUMER, stream=stream)
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
    nc = await connect(url)
    before = own_cpu()
    for n in range(count):
        await nc.publish(names.runner_assign(f"runner-{n % lanes}"), PAYLOAD)
        if n % lanes == lanes - 1:
            await asyncio.sleep(0)  # a round of offers, then the loop turns, as in a service
    await nc.flush()
    cpu = own_cpu() - before
    await nc.close()
    return {"cpu_s": cpu, "messages": count}


async def hear(url: str, count: int, subject: str) -> dict[str, Any]:
    nc = await connect(url)
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

    await nc.subscribe(subject, cb=heard)
    await nc.flush()
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.wait_for(done.wait(), 60)
    cpu = own_cpu() - started[0]
    await nc.close()
    return {"cpu_s": cpu, "messages": got}


async def main(argv: list[str]) -> dict[str, Any]:
    part, url, count, lanes = argv[0], argv[1], int(argv[2]), int(argv[3])
    arg = argv[4] if argv[4:] else ""
    if part == "spawn":
        return await spawn(count, lanes, int(os.environ["FLOOR_FIRST_UID"]) + int(arg or 0))
    if part == "publish":
        return await publish(url, count, lanes, arg)
    if part == "put":
        return await publish(url, count, lanes, "record")
    if part == "consume":
        return await consume(url, count, arg)
    if part == "send":
        return await send(url, count, lanes)
    if part == "hear":
        return await hear(url, count, arg)
    raise SystemExit(f"unknown part {part!r}: spawn, publish, put, consume, send or hear")


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:  # as the services run
        print(json.dumps(runner.run(main(sys.argv[1:]))), flush=True)
