"""``python -m bench --profile soak``: Heddle under a steady mixed load for minutes while its
orchestrators and dispatchers are killed in turn; does anything grow, is anything lost, does
anything run twice?

The stack: 3 orchestrators, 2 dispatchers (``dispatcher``, ``dispatcher-1``, each under its
own name as ``heddle up`` runs them), 4 runners and the gateway, with retention on and short
(finished runs deleted a minute after they end), so the store reaches a steady size. The
load (bench/soak_load.py): runs submitted at a steady rate, open loop, diamonds, chains and
fan-outs in turn, and a registered workflow the scheduler runs every minute; every step
writes itself into a ledger and prints log lines. Every ``--kill-every`` seconds one
orchestrator or dispatcher, in turn, is SIGKILLed and started again a few seconds later.
Every few seconds each service's RSS and CPU (from /proc) and the store's size (its folder
on disk, and JetStream's account storage) are sampled; each run's latency is submit -> its
``end`` event. At the end, the runs still under way get a while to end, then the ledger is
checked (bench/soak_verdict.py) and the samples aggregated per minute with the slope of each
series (bench/soak_series.py), printed (bench/soak_report.py) and written to
bench/results/<stamp>-soak.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from heddle.shared.core.cron_plan import scheduled_run_id
from heddle.shared.wire import names

from bench.probe import Probe, new_run_id
from bench.procfs import proc_sample
from bench.soak_load import CRON_WORKFLOW, RUN_PREFIX, cron_workflow, mix, step_ids
from bench.soak_series import ProcPoint, RunPoint, StorePoint
from bench.soak_verdict import Expected, parse_ledger, verdict
from bench.stack import BenchStack

# Retention on and short: a finished run is deleted within 75 s (age + one sweep).
SOAK_SETTINGS = {
    "HEDDLE_RETENTION_AGE": "60",
    "HEDDLE_RETENTION_INTERVAL": "15",
    "HEDDLE_RETENTION_RUNS": "20",
    # Steps run as the runner's own user, so that they can append to the ledger.
    "HEDDLE_STEP_USER": "none",
}
ORCHESTRATORS, DISPATCHERS, RUNNERS = 3, 2, 4
VICTIMS = ("orchestrator", "dispatcher", "orchestrator-1", "dispatcher-1", "orchestrator-2")
RESTART_AFTER = 3.0  # seconds a killed service stays down
DRAIN = 180.0  # seconds the runs under way at the load's end get to end
MB = 1024 * 1024


def go_heap(prof_port: int) -> dict[str, int]:
    """nats-server's runtime.MemStats heap figures, from its heap profile's text form
    (empty if it does not answer)."""
    url = f"http://127.0.0.1:{prof_port}/debug/pprof/heap?debug=1"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode(errors="replace")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        parts = line.split()  # "# HeapAlloc = 123"
        if len(parts) == 4 and parts[0] == "#" and parts[2] == "=" and parts[3].isdigit():
            out[parts[1]] = int(parts[3])
    return {k: out[k] for k in ("HeapAlloc", "HeapSys", "HeapReleased") if k in out}


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def follow_end(session: aiohttp.ClientSession, url: str) -> tuple[str, float]:
    """The status its ``end`` event tells, and when it came; asks again while the run is
    not stored yet (404) or when the stream breaks. Runs until it is cancelled."""
    while True:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(f"{url}?steps=none") as resp:
                if resp.status == 200:
                    event = b""
                    async for line in resp.content:
                        if line.startswith(b"event: "):
                            event = line[7:].strip()
                        elif event == b"end" and line.startswith(b"data: "):
                            return json.loads(line[6:])["status"], time.monotonic()
        await asyncio.sleep(0.5)


@dataclass
class Soak:
    stack: BenchStack
    probe: Probe
    ledger: Path
    minutes: float
    t0: float = 0.0  # monotonic, the load's start
    procs: list[ProcPoint] = field(default_factory=list)
    stores: list[StorePoint] = field(default_factory=list)
    runs: list[RunPoint] = field(default_factory=list)
    kills: list[dict[str, Any]] = field(default_factory=list)
    expected: Expected = field(default_factory=Expected)
    ended: dict[str, str] = field(default_factory=dict)
    followers: set[asyncio.Task[None]] = field(default_factory=set)
    # Each stream's (messages, bytes), once a minute from the load's start: where growth is.
    streams: list[tuple[float, dict[str, tuple[int, int]]]] = field(default_factory=list)
    # nats-server's Go heap once a minute: (t, HeapAlloc MB, HeapSys MB, HeapReleased MB),
    # to tell what it holds from what its runtime has not given back.
    heap: list[tuple[float, float, float, float]] = field(default_factory=list)

    @property
    def load_end(self) -> float:
        return self.t0 + self.minutes * 60

    async def until(self, at: float) -> bool:
        """Sleep until monotonic ``at``; False if that is past the load's end."""
        if at >= self.load_end:
            return False
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        return True

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.followers.add(task)
        task.add_done_callback(self.followers.discard)

    async def follow(self, run_id: str, submitted: float | None) -> None:
        assert self.probe.session is not None
        url = f"{self.probe.base_url}/api/runs/{run_id}/events"
        status, at = await follow_end(self.probe.session, url)
        self.ended[run_id] = status
        if submitted is not None:
            self.runs.append(RunPoint(at - self.t0, at - submitted))

    async def one_run(self, i: int, steps: list[dict[str, Any]]) -> None:
        run_id = new_run_id(f"{RUN_PREFIX}{i:05d}")
        try:
            sub = await self.probe.submit(run_id, steps)
        except (aiohttp.ClientError, TimeoutError):
            self.expected.refused += 1
            return
        if sub.status not in (200, 201, 202):
            self.expected.refused += 1
            return
        self.expected.submitted[run_id] = step_ids(steps)
        await self.follow(run_id, sub.started)

    async def submit_loop(self, rate: float) -> None:
        shapes = mix(str(self.ledger))
        i = 0
        while await self.until(self.t0 + i / rate):  # open loop: a slow answer delays nothing
            self.spawn(self.one_run(i, shapes[i % len(shapes)][1]))
            i += 1

    async def sample_loop(self, every: float) -> None:
        assert self.probe.nc is not None
        js = self.probe.nc.jetstream()
        k = 0
        while await self.until(self.t0 + k * every):
            t = time.monotonic() - self.t0
            for name, pid in self.stack.pids().items():
                s = proc_sample(pid)
                if s is not None:
                    self.procs.append(ProcPoint(t, name, pid, s.rss_mb, s.cpu_s))
            disk = await asyncio.to_thread(self.stack.store_bytes)
            try:
                jetstream: float | None = (await js.account_info()).storage / MB
            except Exception:  # a sample missed, not a failed soak
                jetstream = None
            self.stores.append(StorePoint(t, disk / MB, jetstream))
            if k % max(1, round(60 / every)) == 0:
                await self.sample_streams(t)
            k += 1

    async def sample_streams(self, t: float) -> None:
        stats = await asyncio.to_thread(go_heap, self.stack.prof_port)
        if stats:
            mb = {k: v / MB for k, v in stats.items()}
            self.heap.append((t, mb["HeapAlloc"], mb["HeapSys"], mb["HeapReleased"]))
        assert self.probe.nc is not None
        js = self.probe.nc.jetstream()
        sizes: dict[str, tuple[int, int]] = {}
        for name in (*names.ALL_STREAMS, *(names.kv_stream(b) for b in names.ALL_BUCKETS)):
            try:
                info = await js.stream_info(name)
            except Exception:  # a sample missed, not a failed soak
                continue
            sizes[name] = (info.state.messages, info.state.bytes)
        self.streams.append((t, sizes))

    async def kill_loop(self, every: float) -> None:
        k = 0
        while await self.until(self.t0 + (k + 1) * every):
            victim = VICTIMS[k % len(VICTIMS)]
            await asyncio.to_thread(self.stack.services[victim].kill)
            self.kills.append({"t": time.monotonic() - self.t0, "service": victim})
            await asyncio.sleep(RESTART_AFTER)
            self.stack.start_service(victim)
            k += 1

    async def cron_loop(self, registered: float, steps: list[str]) -> None:
        """Follow the run of every slot after the registration, through the load's end."""
        slot = (registered // 60 + 1) * 60
        end_wall = time.time() + self.load_end - time.monotonic()
        last = scheduled_run_id(CRON_WORKFLOW, datetime.fromtimestamp(end_wall // 60 * 60, UTC))
        self.expected.cron_prefix, self.expected.cron_last = f"{CRON_WORKFLOW}-", last
        while slot <= end_wall:
            await asyncio.sleep(max(0.0, slot - time.time()))
            run_id = scheduled_run_id(CRON_WORKFLOW, datetime.fromtimestamp(slot, UTC))
            self.expected.cron[run_id] = steps
            self.spawn(self.follow(run_id, None))
            slot += 60

    async def drain(self) -> None:
        """The runs under way get DRAIN seconds to end; the rest never ended."""
        if self.followers:
            await asyncio.wait(set(self.followers), timeout=DRAIN)
        for task in list(self.followers):
            task.cancel()

    def check_ledger(self) -> dict[str, Any]:
        rows, torn = parse_ledger(self.ledger.read_text())
        return verdict(self.expected, self.ended, rows, torn)


async def register_cron(probe: Probe, ledger: Path) -> tuple[float, list[str]]:
    """The cron workflow registered; when (the gateway's stamp) and its step ids."""
    doc = cron_workflow(str(ledger))
    status, body = await probe.request("POST", "/api/workflows", json=doc)
    if status not in (200, 201):
        raise RuntimeError(f"registering {CRON_WORKFLOW}: {status} {body}")
    status, body = await probe.request("GET", f"/api/workflows/{CRON_WORKFLOW}")
    if status != 200:
        raise RuntimeError(f"reading {CRON_WORKFLOW}: {status} {body}")
    return _epoch(body["registeredAt"]), step_ids(doc["steps"])


async def warm_up(soak: Soak) -> None:
    """One run end to end before the clock starts: connections and consumers open."""
    run_id = new_run_id("warmup")
    sub = await soak.probe.submit(run_id, [{"id": "w", "command": "true"}])
    if sub.status not in (200, 201, 202):
        raise RuntimeError(f"warm-up refused: {sub.status} {sub.body}")
    assert soak.probe.session is not None
    url = f"{soak.probe.base_url}/api/runs/{run_id}/events"
    await asyncio.wait_for(follow_end(soak.probe.session, url), 60)


async def run_soak(
    minutes: float, kill_every: float, rate: float, sample_every: float, settings: dict[str, str]
) -> tuple[Soak, dict[str, Any]]:
    """The soak, and what it found out besides its samples (the verdict, or an error)."""
    stack = BenchStack(
        runners=RUNNERS,
        settings={**SOAK_SETTINGS, **settings},
        orchestrators=ORCHESTRATORS,
        dispatchers=DISPATCHERS,
    )
    stack.start()
    soak = Soak(stack, stack.probe("events"), stack.tmp / "ledger", minutes)
    soak.ledger.touch()
    out: dict[str, Any] = {"settings": stack.settings}
    try:
        await stack.wait_ready(timeout=120)
        await soak.probe.open()
        registered, cron_steps = await register_cron(soak.probe, soak.ledger)
        await warm_up(soak)
        soak.t0 = time.monotonic()
        await asyncio.gather(
            soak.submit_loop(rate),
            soak.sample_loop(sample_every),
            soak.kill_loop(kill_every),
            soak.cron_loop(registered, cron_steps),
        )
        await soak.sample_streams(time.monotonic() - soak.t0)
        await soak.drain()
        out["verdict"] = soak.check_ledger()
        out["not_running_at_end"] = sorted(n for n, s in stack.services.items() if not s.alive())
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["logs"] = {n: stack.tail(n, 1500) for n in stack.services}
    finally:
        for task in list(soak.followers):
            task.cancel()
        await soak.probe.close()
        stack.stop()
    return soak, out
