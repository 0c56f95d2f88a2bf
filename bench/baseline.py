"""The machine's own limit: the same DAG run by a minimal in-process asyncio executor.

No NATS, no services, no durability: steps are started in topological order by
``concurrency`` workers (the runner count of the Heddle stack it is compared with), each
spawned as ``/bin/sh -c <command>`` in a new session with stdout and stderr captured, exactly
as a runner agent spawns them, and reaped through pidfds (the runner agents' child watcher).

Run as its own process (``python -m bench.baseline < job.json``) so that its event loop,
child watcher and CPU are not shared with the harness. Input: ``{"runs": [[step, ...], ...],
"concurrency": N}``; output on stdout: wall seconds, each run's completion time from the
start, each step's ready -> spawned latency, and the stdout lines captured.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import warnings
from collections import deque
from typing import Any


def use_pidfd_child_watcher() -> None:
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(asyncio.PidfdChildWatcher())


async def execute(
    runs: list[list[dict[str, Any]]], concurrency: int, interval: float = 0.0
) -> dict[str, Any]:
    """``run_done`` is each run's time from its start to its last step's end: run i starts
    at i * ``interval`` (all at once by default)."""
    # Nodes are (run index, step id); the runs share the workers, as they share a pool.
    parents_left: dict[tuple[int, str], int] = {}
    children: dict[tuple[int, str], list[tuple[int, str]]] = {}
    command: dict[tuple[int, str], str] = {}
    run_left = [len(steps) for steps in runs]
    for r, steps in enumerate(runs):
        for s in steps:
            node = (r, str(s["id"]))
            command[node] = str(s["command"])
            deps = list(s.get("dependsOn") or [])
            parents_left[node] = len(deps)
            children.setdefault(node, [])
            for d in deps:
                children.setdefault((r, str(d)), []).append(node)
    queue: asyncio.Queue[tuple[tuple[int, str], float] | None] = asyncio.Queue()
    t0 = time.perf_counter()
    run_start = [t0 + r * interval for r in range(len(runs))]
    loop = asyncio.get_running_loop()
    for node, n in parents_left.items():
        if n == 0:
            start = run_start[node[0]]
            if start == t0:
                queue.put_nowait((node, t0))
            else:
                loop.call_later(start - t0, queue.put_nowait, (node, start))
    remaining = len(parents_left)
    all_done = asyncio.Event()
    run_done: list[float | None] = [None] * len(runs)
    dispatch: list[float] = []
    lines = 0
    failed: deque[str] = deque(maxlen=5)
    if remaining == 0:
        all_done.set()

    async def worker() -> None:
        nonlocal remaining, lines
        while True:
            item = await queue.get()
            if item is None:
                return
            node, ready_at = item
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                command[node],
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            now = time.perf_counter()
            dispatch.append(now - ready_at)
            out, _err = await proc.communicate()
            if proc.returncode != 0:
                failed.append(f"{node[1]}: exit {proc.returncode}")
            lines += out.count(b"\n")
            now = time.perf_counter()
            r = node[0]
            run_left[r] -= 1
            if run_left[r] == 0:
                run_done[r] = now - run_start[r]
            for child in children[node]:
                parents_left[child] -= 1
                if parents_left[child] == 0:
                    queue.put_nowait((child, now))
            remaining -= 1
            if remaining == 0:
                all_done.set()

    workers = [asyncio.create_task(worker()) for _ in range(max(concurrency, 1))]
    await all_done.wait()
    wall = time.perf_counter() - t0
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    return {
        "wall": wall,
        "steps": len(parents_left),
        "run_done": run_done,
        "dispatch": dispatch,
        "lines": lines,
        "failed": list(failed),
    }


async def execute_one_by_one(runs: list[list[dict[str, Any]]], concurrency: int) -> dict[str, Any]:
    """Each run alone, one after another: the latency of a run on an idle machine."""
    t0 = time.perf_counter()
    walls: list[float] = []
    dispatch: list[float] = []
    failed: list[str] = []
    lines = 0
    for run in runs:
        one = await execute([run], concurrency)
        walls.append(one["wall"])
        dispatch.extend(one["dispatch"])
        failed.extend(one["failed"])
        lines += one["lines"]
    return {
        "wall": time.perf_counter() - t0,
        "steps": sum(len(r) for r in runs),
        "run_done": walls,  # here: each run's own duration
        "dispatch": dispatch,
        "lines": lines,
        "failed": failed[:5],
    }


def main() -> int:
    job = json.load(sys.stdin)
    use_pidfd_child_watcher()
    if job.get("oneByOne"):
        work = execute_one_by_one(job["runs"], int(job["concurrency"]))
    else:
        work = execute(job["runs"], int(job["concurrency"]), float(job.get("interval") or 0.0))
    result = asyncio.run(work)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
