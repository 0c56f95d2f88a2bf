"""``python -m bench.runners_alone``: Heddle's runner agents as the stack runs them, offered
fan-out steps directly, and what each step costs them; beside the floor's runners
(bench/floor.py), what the runner's own work adds.

The stack is ``make bench``'s (its users and accounts, its settings, steps as a uid of each
runner's own where it runs as root), without the dispatcher and the gateway; the
orchestrator makes the streams and stops before the first offer. A driver, as the
dispatcher's user, offers each runner one step at a time as a dispatcher does
(``Heddle-Answer: outcome``) and waits for the step's ``finished`` event before the next.
Only the runners, their step launchers and nats-server work meanwhile: a change to the
runner's path shows here with far less of the rest of the stack's noise.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import time

import msgspec
import nats
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepFinished, StepReady, encode
from heddle.shared.wire.timefmt import now_rfc3339

from bench.processes import stop_all
from bench.stack import BenchStack

finished_decoder = msgspec.json.Decoder(StepFinished)
START_WITHIN = 60.0  # seconds for every runner to take offers


class Driver:
    """Offers steps to the runners and hears their outcomes, as the dispatcher's user."""

    def __init__(self, nc: nats.NATS, run_id: str) -> None:
        self.nc, self.run_id = nc, run_id
        self.waiting: dict[str, asyncio.Future[StepFinished]] = {}
        self.failed: list[str] = []

    async def start(self) -> None:
        await self.nc.subscribe(names.EVT_FINISHED_ALL, cb=self._heard)

    async def _heard(self, msg: nats.aio.msg.Msg) -> None:
        finished = finished_decoder.decode(msg.data)
        if finished.outcome != "succeeded":
            self.failed.append(f"{finished.step_id}: {finished.outcome} {finished.reason}")
        future = self.waiting.pop(finished.step_id, None)
        if future is not None and not future.done():
            future.set_result(finished)

    async def step(self, runner: str, step_id: str) -> None:
        ready = StepReady(
            run_id=self.run_id,
            step_id=step_id,
            attempt=1,
            command="true",
            timeout_seconds=60.0,
            ready_at=now_rfc3339(),
            ticket=secrets.token_urlsafe(16),
        )
        future = self.waiting[step_id] = asyncio.get_running_loop().create_future()
        await self.nc.publish(
            names.runner_assign(runner),
            encode(ready),
            reply=self.nc.new_inbox(),
            headers={names.ANSWER_HEADER: names.ANSWER_BY_OUTCOME},
        )
        await asyncio.wait_for(future, 30)

    async def lane(self, runner: str, steps: int, first: int) -> None:
        for n in range(first, first + steps):
            await self.step(runner, f"s{n:06d}")

    async def until_taken(self, runner: str) -> None:
        """Until ``runner`` answers an offer (it subscribes once its streams are there): one
        it cannot read, which it refuses at once."""
        deadline = time.monotonic() + START_WITHIN
        while True:
            try:
                await self.nc.request(names.runner_assign(runner), b"{}", timeout=1.0)
                return
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)


async def drive(stack: BenchStack, count: int, lanes: int, reps: int) -> list[dict[str, float]]:
    assert stack.auth is not None
    user = perms.DISPATCHER
    nc = await nats.connect(
        stack.nats_url,
        user=user,
        password=stack.auth.users.passwords[user],
        inbox_prefix=perms.inbox_prefix(user),
    )
    driver = Driver(nc, f"{int(time.time() * 1000):x}-{secrets.token_hex(4)}")
    await driver.start()
    runners = [f"runner-{i}" for i in range(lanes)]
    for runner in runners:
        await driver.until_taken(runner)
    stop_all([stack.services["orchestrator"]])  # its work is done: the streams are there
    each, results = count // lanes, []
    for rep in range(reps):
        before = stack.samples()
        await asyncio.gather(
            *(driver.lane(r, each, rep * count + i * each) for i, r in enumerate(runners))
        )
        after = stack.samples()
        results.append(per_step(before, after, each * lanes))
    await nc.close()
    if driver.failed:
        raise RuntimeError(f"steps failed: {driver.failed[:5]}")
    return results


def per_step(before: dict, after: dict, steps: int) -> dict[str, float]:
    """ms of CPU per step: the runners, their launchers, nats-server."""
    out = {"runners": 0.0, "launchers": 0.0, "nats-server": 0.0}
    for name, sample in after.items():
        if name not in before:
            continue
        kind = (
            "launchers"
            if name.startswith("launcher-")
            else "runners"
            if name.startswith("runner-")
            else name
        )
        if kind in out:
            out[kind] += (sample.cpu_s - before[name].cpu_s) / steps * 1000
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4000, help="per repetition")
    parser.add_argument("--lanes", type=int, default=8, help="runners")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--set", action="append", default=[], metavar="HEDDLE_X=VALUE", help="a runner setting"
    )
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.set)
    stack = BenchStack(runners=args.lanes, settings=settings)
    try:
        stack.start(without=("dispatcher", "gateway"))
        results = asyncio.run(drive(stack, args.steps, args.lanes, args.reps))
    finally:
        stack.stop()
    print("ms of CPU per step, median [min-max] of", args.reps, "repetitions:")
    for kind in results[0]:
        values = [r[kind] for r in results]
        print(f"  {kind:12} {statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
