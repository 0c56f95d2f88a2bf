"""One side of ``python -m bench.ab``: a stack of the checkout it runs in, driven over
stdin. It prints ``ready`` once the pool is up; then each line ``run`` submits the
workload's runs at once, waits for their ends as a client sees them (the events stream),
and prints the median latency in milliseconds (a lone run's, for a workload of one);
``quit`` (or the end of input) stops the stack. Its settings (``HEDDLE_X=VALUE``) are those
of every service of the stack.

It runs with that checkout's ``bench`` package (``python -c``, from its top folder), so an
earlier commit is driven by its own harness and its own NATS users.
"""

from __future__ import annotations

import asyncio
import sys
import time

from bench.probe import new_run_id
from bench.stack import BenchStack
from bench.stats import percentile
from bench.workloads import make


async def drive(workload: str, settings: dict[str, str] | None = None) -> None:
    w = make(workload)
    stack = BenchStack(runners=w.runners, settings=dict(settings or {}))
    stack.start()
    try:
        await stack.wait_ready()
        probe = stack.probe()
        await probe.open()
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        print("ready", flush=True)
        try:
            while (await reader.readline()).strip() == b"run":
                run_ids = [new_run_id("ab") for _ in w.runs]
                ends = [probe.expect(run_id) for run_id in run_ids]
                t0 = time.monotonic()
                subs = await asyncio.gather(
                    *(probe.submit(r, steps) for r, steps in zip(run_ids, w.runs, strict=True))
                )
                if bad := [s.status for s in subs if s.status not in (200, 201, 202)]:
                    print(f"error: submit answered {bad[0]}", flush=True)
                    return
                done = await asyncio.wait_for(asyncio.gather(*ends), 60 + len(run_ids))
                print(f"{(percentile(done, 50) - t0) * 1000:.3f}", flush=True)
        finally:
            await probe.close()
    finally:
        stack.stop()


if __name__ == "__main__":
    asyncio.run(drive(sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])))
