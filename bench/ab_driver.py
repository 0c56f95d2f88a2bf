"""One side of ``python -m bench.ab``: a stack of the checkout it runs in, driven over
stdin. It prints ``ready`` once the pool is up; then each line ``run`` submits the
workload's first run, waits for its end as a client sees it (the events stream), and
prints the latency in milliseconds; ``quit`` (or the end of input) stops the stack. Its
settings (``HEDDLE_X=VALUE``) are those of every service of the stack.

It runs with that checkout's ``bench`` package (``python -c``, from its top folder), so an
earlier commit is driven by its own harness and its own NATS users.
"""

from __future__ import annotations

import asyncio
import sys
import time

from bench.probe import new_run_id
from bench.stack import BenchStack
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
                run_id = new_run_id("ab")
                end = probe.expect(run_id)
                t0 = time.monotonic()
                sub = await probe.submit(run_id, w.runs[0])
                if sub.status not in (200, 201, 202):
                    print(f"error: submit answered {sub.status}", flush=True)
                    return
                print(f"{(await asyncio.wait_for(end, 60) - t0) * 1000:.3f}", flush=True)
        finally:
            await probe.close()
    finally:
        stack.stop()


if __name__ == "__main__":
    asyncio.run(drive(sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])))
