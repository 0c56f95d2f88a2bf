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
from pathlib import Path

import msgspec
import nats
from heddle.services.gateway.http.submit import new_run_id
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepFinished, StepReady, encode
from heddle.shared.wire.timefmt import now_rfc3339

from bench.processes import stop_all
from bench.report import service_group
from bench.stack import BenchStack
from bench.stats import paired

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


class Side:
    """One stack of runners and the driver that offers them steps."""

    def __init__(self, stack: BenchStack, count: int, lanes: int) -> None:
        self.stack, self.count, self.lanes = stack, count, lanes
        self.runners = [f"runner-{i}" for i in range(lanes)]
        self.done = 0  # steps offered so far: each step's id is new
        self.driver: Driver | None = None

    async def prepare(self) -> None:
        """Connected as the dispatcher, every runner taking offers, the orchestrator gone."""
        stack = self.stack
        assert stack.auth is not None
        user = perms.DISPATCHER
        nc = await nats.connect(
            stack.nats_url,
            user=user,
            password=stack.auth.users.passwords[user],
            inbox_prefix=perms.inbox_prefix(user),
        )
        self.driver = Driver(nc, new_run_id())
        await self.driver.start()
        for runner in self.runners:
            await self.driver.until_taken(runner)
        stop_all([stack.services["orchestrator"]])  # its work is done: the streams are there

    async def rep(self) -> dict[str, float]:
        driver, each = self.driver, self.count // self.lanes
        assert driver is not None
        before = self.stack.samples()
        first = self.done
        await asyncio.gather(
            *(driver.lane(r, each, first + i * each) for i, r in enumerate(self.runners))
        )
        self.done += each * self.lanes
        after = self.stack.samples()
        if driver.failed:
            raise RuntimeError(f"steps failed: {driver.failed[:5]}")
        return per_step(before, after, each * self.lanes)

    async def close(self) -> None:
        if self.driver is not None:
            await self.driver.nc.close()


async def rounds(sides: list[Side], reps: int) -> list[list[dict[str, float]]]:
    """``reps`` repetitions on each side, in turn, ABBA: a drift of the machine's speed
    falls on both."""
    results: list[list[dict[str, float]]] = [[] for _ in sides]
    try:
        for side in sides:
            await side.prepare()
        for r in range(reps):
            order = list(enumerate(sides))
            for i, side in order if r % 2 == 0 else reversed(order):
                results[i].append(await side.rep())
    finally:
        for side in sides:
            await side.close()
    return results


KINDS = ("runners", "launchers", "nats-server")
WOKE = "wake-ups of "  # the key of a kind's sleeps per step (procfs.sleeps)


def per_step(before: dict, after: dict, steps: int) -> dict[str, float]:
    """ms of CPU per step of the runners, their launchers and nats-server; and the sleeps
    (wake-ups) per step of each."""
    out = dict.fromkeys(KINDS, 0.0) | {WOKE + kind: 0.0 for kind in KINDS}
    for name, sample in after.items():
        if name not in before:
            continue
        group = service_group(name)
        kind = "launchers" if group == "step launchers" else group
        if kind in KINDS:
            out[kind] += (sample.cpu_s - before[name].cpu_s) / steps * 1000
            out[WOKE + kind] += (sample.sleeps - before[name].sleeps) / steps
    return out


def total(figures: dict[str, float]) -> float:
    """The CPU of every kind, per step."""
    return sum(figures[kind] for kind in KINDS)


def report(results: list[list[dict[str, float]]], names_: list[str]) -> str:
    lines = [f"ms of CPU and wake-ups per step, median [min-max] of {len(results[0])} repetitions:"]
    for name, reps in zip(names_, results, strict=True):
        lines.append(f"{name}:")
        for kind in (*KINDS, "all", *(WOKE + k for k in KINDS)):
            values = [total(r) if kind == "all" else r[kind] for r in reps]
            spread = f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"
            lines.append(f"  {kind:24} {spread}")
    if len(results) == 2:
        for kind in ("runners", "all"):
            a, b = ([total(r) if kind == "all" else r[kind] for r in side] for side in results)
            p = paired(a, b)
            lines.append(
                f"{kind}, this minus the other: {p.median_diff:+.3f} ms"
                f" [{p.low:+.3f}, {p.high:+.3f}] (95%), lower in {p.a_faster:.0%} of {p.n} rounds"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4000, help="per repetition")
    parser.add_argument("--lanes", type=int, default=8, help="runners")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--set", action="append", default=[], metavar="HEDDLE_X=VALUE", help="a runner setting"
    )
    parser.add_argument(
        "--against", type=Path, help="another checkout (with its .venv): its runners, in turn"
    )
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.set)
    stacks = [BenchStack(runners=args.lanes, settings=dict(settings))]
    if args.against is not None:
        python = str(args.against.resolve() / ".venv" / "bin" / "python")
        stacks.append(BenchStack(runners=args.lanes, settings=dict(settings), python=python))
    try:
        for stack in stacks:
            stack.start(without=("dispatcher", "gateway"))
        sides = [Side(stack, args.steps, args.lanes) for stack in stacks]
        results = asyncio.run(rounds(sides, args.reps))
    finally:
        for stack in stacks:
            stack.stop()
    print(report(results, ["this checkout", str(args.against)][: len(results)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
