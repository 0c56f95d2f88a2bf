"""``python -m bench.pool_scale``: the dispatcher's pool bookkeeping for one placed step, by
the pool's size, on the calls a dispatcher makes for it (services/dispatcher/pool.py): the
free runners counted for the pulls' credit before and after, one looked for and reserved,
its acceptance, and a finished step's release. Pure Python, no stack: what a pool of
hundreds of runners adds to each step's CPU in the dispatcher.

Two shapes: **busy**, every runner but two holding a step (a fan-out wider than the pool),
and **idle**, eight steps under way in a pool of mostly free runners.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque

from heddle.services.dispatcher.pool import Pool
from heddle.shared.wire.contracts import RunnerInfo

SIZES = (8, 100, 500, 2000)


def pool_of(size: int) -> Pool:
    pool = Pool()
    for i in range(size):
        pool.update(
            RunnerInfo(
                name=f"runner-{i}",
                status="idle",
                pid=i + 1,
                version="bench",
                started_at="t",
                seen_at="t",
            )
        )
    return pool


def placed_steps(size: int, busy: int, steps: int) -> float:
    """Microseconds of pool bookkeeping per placed step, with ``busy`` steps under way."""
    pool, running = pool_of(size), deque[tuple[str, str]]()
    jobs = 0

    def place(step: str) -> None:
        nonlocal jobs
        pool.free_by_key()
        assert pool.any_free("")
        name = pool.reserve(key="")
        assert name is not None
        jobs += 1
        pool.accepted(name, "run", step, 1, jobs)
        running.append((name, step))
        pool.free_by_key()

    for i in range(busy):
        place(f"warm-{i}")
    started = time.perf_counter()
    for i in range(steps):
        name, step = running.popleft()
        pool.release(name, "run", step, 1)
        place(f"step-{i}")
    return (time.perf_counter() - started) / steps * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    print("us of pool bookkeeping per placed step, median [min-max]:")
    print(f"{'runners':>8} | {'busy':>22} | {'idle':>22}")
    for size in SIZES:
        cells = []
        for busy in (size - 2, min(8, size - 2)):
            times = [placed_steps(size, busy, args.steps) for _ in range(args.reps)]
            cells.append(f"{statistics.median(times):.1f} [{min(times):.1f}-{max(times):.1f}]")
        print(f"{size:>8} | {cells[0]:>22} | {cells[1]:>22}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
