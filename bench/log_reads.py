"""``python -m bench.log_reads``: parallel reads of one large step log, and what they cost
the gateway.

A stack on loopback (bench/stack.py) runs one step that prints ``--lines`` lines of
``--width`` bytes (1,000,000 x 50: a 50 MB log), then ``--readers`` clients at once ask for
``GET /api/runs/{run}/steps/{step}?tail=N``. It reports each answer's status and size, the
wall time of the reads, and the gateway's RSS from /proc: before the reads, the highest
sampled during them, and its peak (VmHWM) since it started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from bench.procfs import proc_sample
from bench.stack import BenchStack

SAMPLE_EVERY = 0.05  # seconds between RSS samples of the gateway
STEP = "big"


@dataclass(slots=True)
class Read:
    status: int
    bytes: int
    chunked: bool  # sent without a Content-Length
    complete: bool  # a JSON document that ends with the step's logsCursor
    seconds: float
    error: str = ""


def command(lines: int, width: int) -> str:
    """A shell command printing ``lines`` lines of ``width`` bytes, newline included."""
    digits = max(width - 6, 1)
    return f"seq -f 'line %0{digits}.0f' 1 {lines}"


async def wait_step(session: aiohttp.ClientSession, base: str, run_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with session.get(f"{base}/api/runs/{run_id}") as resp:
            body = await resp.json()
        if body.get("status") in ("succeeded", "failed", "cancelled"):
            if body["status"] != "succeeded":
                raise RuntimeError(f"the log step ended {body['status']}: {body}")
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the log step did not end within {timeout}s")


async def read_one(session: aiohttp.ClientSession, url: str, timeout: float) -> Read:
    """One read, its body counted as it arrives (never held whole here)."""
    t0 = time.monotonic()
    size, end = 0, b""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            chunked = resp.headers.get("Content-Length") is None
            async for block in resp.content.iter_chunked(1 << 16):
                size += len(block)
                end = (end + block)[-200:]
            complete = resp.status == 200 and b'"logsCursor":' in end and end.endswith(b"}")
            return Read(resp.status, size, chunked, complete, time.monotonic() - t0)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Read(0, size, False, False, time.monotonic() - t0, repr(exc))


async def sample_rss(pid: int, stop: asyncio.Event, peak: list[float]) -> None:
    while not stop.is_set():
        s = proc_sample(pid)
        if s is not None:
            peak[0] = max(peak[0], s.rss_mb)
        await asyncio.sleep(SAMPLE_EVERY)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    stack = BenchStack(runners=1, keep=args.keep)
    try:
        stack.start()
        await stack.wait_ready()
        gateway = stack.services["gateway"].pid
        async with aiohttp.ClientSession(headers=stack.headers) as session:
            doc = {"steps": [{"id": STEP, "command": command(args.lines, args.width)}]}
            async with session.post(f"{stack.base_url}/api/runs", json=doc) as resp:
                run_id = (await resp.json())["runId"]
            t0 = time.monotonic()
            await wait_step(session, stack.base_url, run_id, args.timeout)
            wrote_s = time.monotonic() - t0
            await asyncio.sleep(1.0)  # let the gateway settle after the polls
            before = proc_sample(gateway)
            assert before is not None
            url = f"{stack.base_url}/api/runs/{run_id}/steps/{STEP}?tail={args.tail}"
            stop, peak = asyncio.Event(), [before.rss_mb]
            sampler = asyncio.create_task(sample_rss(gateway, stop, peak))
            t0 = time.monotonic()
            reads = await asyncio.gather(
                *(read_one(session, url, args.timeout) for _ in range(args.readers))
            )
            wall = time.monotonic() - t0
            stop.set()
            await sampler
            after = proc_sample(gateway)
            assert after is not None
        return {
            "lines": args.lines,
            "log_mb": args.lines * args.width / 1e6,
            "readers": args.readers,
            "tail": args.tail,
            "write_s": round(wrote_s, 1),
            "rss_before_mb": round(before.rss_mb, 1),
            "rss_peak_during_mb": round(peak[0], 1),
            "rss_after_mb": round(after.rss_mb, 1),
            "vmhwm_mb": round(after.peak_rss_mb, 1),
            "wall_s": round(wall, 1),
            "statuses": [r.status for r in reads],
            "reads": [asdict(r) for r in reads],
            "gateway_log": stack.tail("gateway", 2000) if args.show_log else "",
        }
    finally:
        stack.stop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.log_reads", description=__doc__)
    p.add_argument("--lines", type=int, default=1_000_000, help="lines the step prints")
    p.add_argument("--width", type=int, default=50, help="bytes per line, newline included")
    p.add_argument("--readers", type=int, default=8, help="parallel reads")
    p.add_argument("--tail", type=int, default=1_000_000, help="?tail= of every read")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for each phase")
    p.add_argument("--keep", action="store_true", help="keep the stack's temporary folder")
    p.add_argument("--show-log", action="store_true", help="include the gateway's log tail")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{result['readers']} reads of tail={result['tail']} from a {result['log_mb']:.0f} MB "
        f"log ({result['lines']} lines, written in {result['write_s']} s)"
    )
    print(
        f"gateway RSS: {result['rss_before_mb']} MB before, {result['rss_peak_during_mb']} MB "
        f"at most during, {result['rss_after_mb']} MB after; VmHWM {result['vmhwm_mb']} MB"
    )
    print(f"wall time of the reads: {result['wall_s']} s; statuses {result['statuses']}")
    for r in result["reads"]:
        print(
            f"  {r['status']} {r['bytes'] / 1e6:8.1f} MB in {r['seconds']:6.1f} s "
            f"chunked={r['chunked']} complete={r['complete']} {r['error']}"
        )
    if result["gateway_log"]:
        print(result["gateway_log"], file=sys.stderr)
    return 0 if all(r["complete"] for r in result["reads"]) else 1


if __name__ == "__main__":
    sys.exit(main())
