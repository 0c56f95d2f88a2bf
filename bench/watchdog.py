"""The watchdog's detection latency (issue 3): how long after a runner dies mid-step is its
step failed?

A stack with short liveness intervals and one runner; repeatedly: a run whose first step is
``sleep 30`` (and a second step after it), SIGKILL of the runner and its child command at a
random phase of the heartbeat interval once the step runs, then GET /api/runs/{run} polled
until the step is failed. The latency is kill -> failed as a client sees it; the bound is
interval x grace + one scan + 1 s. The runner is restarted (under a new name, as a
replacement pod) before the next kill.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from bench.harness import Say, _epoch
from bench.probe import Probe, new_run_id
from bench.stack import BenchStack
from bench.stats import Spread, percentile

POLL = 0.01


def watchdog_settings(interval: float, grace: float, scan: float) -> dict[str, str]:
    return {
        "HEDDLE_HEARTBEAT_INTERVAL": str(interval),
        "HEDDLE_HEARTBEAT_GRACE": str(grace),
        "HEDDLE_WATCHDOG_SCAN": str(scan),
        "HEDDLE_REGISTRY_INTERVAL": "0.3",
        "HEDDLE_REGISTRY_TTL": "2",
        "HEDDLE_ASSIGN_TIMEOUT": "1",
        "HEDDLE_KILL_GRACE": "1",
        "HEDDLE_SHUTDOWN_GRACE": "3",
    }


def _step(doc: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in doc["steps"] if s["id"] == step_id)


async def _poll_step(
    probe: Probe, run_id: str, step_id: str, statuses: set[str], timeout: float
) -> tuple[dict[str, Any], float]:
    deadline = time.monotonic() + timeout
    while True:
        status, doc = await probe.request("GET", f"/api/runs/{run_id}")
        now = time.monotonic()
        if status == 200 and doc["steps"]:
            step = _step(doc, step_id)
            if step["status"] in statuses:
                return doc, now
        if now > deadline:
            raise RuntimeError(f"step {run_id}/{step_id} not {statuses} after {timeout}s")
        await asyncio.sleep(POLL)


async def run_watchdog(
    kills: int, say: Say, interval: float = 0.2, grace: float = 3.0, scan: float = 0.2
) -> dict[str, Any]:
    bound = interval * grace + scan + 1.0
    stack = BenchStack(runners=1, settings=watchdog_settings(interval, grace, scan))
    out: dict[str, Any] = {
        "interval_s": interval,
        "grace": grace,
        "scan_s": scan,
        "bound_s": bound,
        "kills": [],
    }
    rng = random.Random(7)
    stack.start()
    probe = stack.probe("records")  # the verdict as stored: the watchdog, not a client
    runner = "runner-0"
    try:
        await stack.wait_ready()
        await probe.open()
        for i in range(kills):
            run_id = new_run_id(f"wd{i}")
            end = probe.expect(run_id)
            sub = await probe.submit(
                run_id,
                [
                    {"id": "victim", "command": "sleep 30"},
                    {"id": "after", "command": "true", "dependsOn": ["victim"]},
                ],
            )
            if sub.status not in (200, 201, 202):
                raise RuntimeError(f"submit refused: {sub.status} {sub.body}")
            await _poll_step(probe, run_id, "victim", {"running"}, 30)
            # Past the first heartbeats, then at a random phase of the interval.
            await asyncio.sleep(2 * interval + rng.random() * interval)
            killed_wall, killed = time.time(), time.monotonic()
            stack.kill_with_children(runner)
            doc, seen = await _poll_step(
                probe, run_id, "victim", {"failed", "succeeded", "cancelled"}, bound + 30
            )
            await asyncio.wait_for(end, 30)
            doc = await probe.run_document(run_id)
            victim, after = _step(doc, "victim"), _step(doc, "after")
            verdict_at = _epoch(victim.get("finishedAt"))
            sample = {
                "run": run_id,
                "runner": runner,
                "detect_s": seen - killed,
                "verdict_s": verdict_at - killed_wall if verdict_at else None,
                "step": victim["status"],
                "reason": victim.get("reason"),
                "dependent": after["status"],
                "run_status": doc["status"],
                "ok": victim["status"] == "failed"
                and "silent" in (victim.get("reason") or "")
                and after["status"] == "skipped"
                and doc["status"] == "failed",
            }
            out["kills"].append(sample)
            say(
                f"  watchdog kill {i + 1}/{kills}: failed after {sample['detect_s']:.3f}s "
                f"(bound {bound:.1f}s): {sample['reason']}"
            )
            # A replacement pod: a new runner process (with a new name) joins the pool.
            runner = f"runner-{i + 1}"
            stack.start_service(runner)
            await stack.wait_ready(runners=None, available=1)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["logs"] = {n: stack.tail(n, 1500) for n in stack.services}
        say(f"  watchdog: ERROR {out['error']}")
    finally:
        await probe.close()
        stack.stop()
    detect = [k["detect_s"] for k in out["kills"]]
    out["detect_p50_s"] = percentile(detect, 50)
    out["detect_max_s"] = max(detect) if detect else None
    spread = Spread.of(detect)
    out["detect"] = spread.to_json() if spread else None
    verdict = [k["verdict_s"] for k in out["kills"] if k["verdict_s"] is not None]
    out["verdict_p50_s"] = percentile(verdict, 50)
    out["all_ok"] = bool(out["kills"]) and all(k["ok"] for k in out["kills"])
    return out
