"""One workload, measured: a fresh stack, then per repetition the baseline executor and the
same DAG submitted to Heddle, each figure read from the run documents (and, for server-side
times, from JetStream metadata)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from heddle.shared.runtime.settings import Settings
from heddle.shared.wire.contracts import TERMINAL_RUN

from bench.messages import count_pass
from bench.probe import Probe, new_run_id
from bench.procfs import ProcSample
from bench.stack import TAP, BenchStack
from bench.stats import percentile
from bench.workloads import Workload

Say = Callable[[str], None]
# The workloads whose messages per step are counted (bench/messages.py), after their reps.
COUNTED = ("chain", "fanout", "diamonds")


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


async def run_baseline(
    runs: list[list[dict[str, Any]]],
    concurrency: int,
    one_by_one: bool = False,
    interval: float = 0.0,
) -> dict[str, Any]:
    """The baseline executor in its own process (see bench/baseline.py); ``interval`` > 0
    starts run i at i * interval instead of all at once."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.baseline",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    job = {"runs": runs, "concurrency": concurrency, "oneByOne": one_by_one, "interval": interval}
    out, err = await proc.communicate(json.dumps(job).encode())
    if proc.returncode != 0:
        raise RuntimeError(f"baseline failed ({proc.returncode}): {err.decode()[-2000:]}")
    return json.loads(out)


def baseline_figures(w: Workload, b: dict[str, Any]) -> dict[str, float | None]:
    done = [t for t in b["run_done"] if t is not None]
    wall = b["wall"]
    return {
        "wall_s": wall,
        "steps_per_s": b["steps"] / wall if wall else None,
        "runs_per_s": len(done) / wall if wall else None,
        "run_p50_ms": _ms(percentile(done, 50)),
        "run_p99_ms": _ms(percentile(done, 99)),
        "dispatch_p50_ms": _ms(percentile(b["dispatch"], 50)),
        "dispatch_p99_ms": _ms(percentile(b["dispatch"], 99)),
        "lines_per_s": b["lines"] / wall if w.kind == "logs" and wall else None,
        "failed_steps": float(len(b["failed"])),
    }


def counter_delta(
    before: dict[str, ProcSample], after: dict[str, ProcSample], counter: str
) -> dict[str, float]:
    """Each process's ``counter`` (``cpu_s``, ``sleeps``) between two samples; a process
    restarted meanwhile (its counter lower) is left out."""
    out = {}
    for name, sample in after.items():
        if name in before:
            grew = getattr(sample, counter) - getattr(before[name], counter)
            if grew >= 0:
                out[name] = grew
    return out


async def _documents(probe: Probe, run_ids: list[str], expected: list[int]) -> tuple[list, int]:
    """Every run's document. A document with fewer steps than the run has, or not terminal
    yet, is read again (and counted as ``short_document_reads``: docs/performance.md, "What it
    measures")."""
    sem = asyncio.Semaphore(16)
    short = 0

    async def doc(run_id: str, steps: int) -> dict[str, Any]:
        nonlocal short
        async with sem:
            for _ in range(10):
                d = await probe.run_document(run_id)
                if len(d["steps"]) == steps and d["status"] in TERMINAL_RUN:
                    return d
                short += 1
                await asyncio.sleep(0.05)
            return d

    docs = await asyncio.gather(*(doc(r, n) for r, n in zip(run_ids, expected, strict=True)))
    return list(docs), short


async def _cancel(probe: Probe, run_id: str, timeout: float) -> None:
    """Cancel a run; one answered 202 (accepted, not stored yet) is 404 until the
    orchestrator stores it, so asked again until it is there."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = await probe.request("POST", f"/api/runs/{run_id}/cancel")
        if status != 404:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} never stored: cancel answered {status} {body}")
        await asyncio.sleep(0.05)


async def _submit_and_wait(
    probe: Probe,
    prefix: str,
    runs: list[list[dict[str, Any]]],
    timeout: float,
    cancel: bool,
    interval: float = 0.0,
) -> tuple[list[str], list, list[float]]:
    """Submit the runs (all at once, or run i at i * ``interval``, open loop: a slow answer
    does not delay the next submit) and wait until every one is terminal."""
    run_ids = [new_run_id(prefix) for _ in runs]
    ends = [probe.expect(r) for r in run_ids]
    t0 = time.monotonic()

    async def submit(i: int) -> Any:
        if interval:
            await asyncio.sleep(max(0.0, t0 + i * interval - time.monotonic()))
        return await probe.submit(run_ids[i], runs[i])

    try:
        subs = await asyncio.gather(*(submit(i) for i in range(len(runs))))
        bad = [s for s in subs if s.status not in (200, 201, 202)]
        if bad:
            raise RuntimeError(f"submit refused: {bad[0].status} {str(bad[0].body)[:500]}")
        if cancel:
            for r in run_ids:
                await _cancel(probe, r, timeout)
        try:
            end_times = await asyncio.wait_for(asyncio.gather(*ends), timeout)
        except TimeoutError:
            left = sum(1 for f in ends if not f.done())
            raise RuntimeError(
                f"{left} of {len(ends)} runs not terminal after {timeout:.0f}s"
            ) from None
    finally:
        for r in run_ids:
            probe.forget(r)
    return run_ids, subs, list(end_times)


BEHIND_AFTER = 0.5  # seconds from the big run's submit to the small one's


async def measure_behind(w: Workload, probe: Probe, rep: int, timeout: float) -> dict[str, Any]:
    """A small run submitted behind a big one under way: the small one's latency, then the
    big one cancelled (its own wall is the fan-out's, and long)."""
    big_id, small_id = new_run_id(f"big{rep}"), new_run_id(f"small{rep}")
    big_end, small_end = probe.expect(big_id), probe.expect(small_id)
    try:
        big = await probe.submit(big_id, w.runs[0])
        await asyncio.sleep(BEHIND_AFTER)
        small = await probe.submit(small_id, w.runs[1])
        if {big.status, small.status} - {200, 201, 202}:
            raise RuntimeError(f"submit refused: {big.status} / {small.status}")
        ended = await asyncio.wait_for(small_end, timeout)
        await _cancel(probe, big_id, timeout)
        await asyncio.wait_for(big_end, timeout)
    finally:
        probe.forget(big_id)
        probe.forget(small_id)
    [doc], _ = await _documents(probe, [small_id], [len(w.runs[1])])
    figures: dict[str, float | None] = {
        "small_run_ms": _ms(ended - small.started),
        "succeeded": 1.0 if doc["status"] == "succeeded" else 0.0,
    }
    return {"figures": figures, "cpu_s": {}, "extra": {}}


async def measure_heddle(
    w: Workload, probe: Probe, stack: BenchStack, rep: int, timeout: float
) -> dict[str, Any]:
    if w.kind == "behind":
        return await measure_behind(w, probe, rep, timeout)
    watch = None
    if len(w.runs) == 1 and not w.accept_only:
        # Server-side times of this run's step records, recorded from before the submit.
        watch_id = new_run_id(f"{w.kind}{rep}")
        watch = await probe.watch_steps(watch_id)
    before = stack.samples()
    if watch is not None:
        run_ids = [watch_id]
        ends = [probe.expect(watch_id)]
        sub = await probe.submit(watch_id, w.runs[0])
        if sub.status not in (200, 201, 202):
            raise RuntimeError(f"submit refused: {sub.status} {str(sub.body)[:500]}")
        try:
            end_times = [await asyncio.wait_for(ends[0], timeout)]
        except TimeoutError:
            raise RuntimeError(f"run not terminal after {timeout:.0f}s") from None
        finally:
            probe.forget(watch_id)
        subs = [sub]
    else:
        run_ids, subs, end_times = await _submit_and_wait(
            probe, f"{w.kind}{rep}", w.runs, timeout, cancel=w.accept_only
        )
    after = stack.samples()
    first = min(s.started for s in subs)
    wall = max(end_times) - first
    per_run = [end - s.started for s, end in zip(subs, end_times, strict=True)]

    docs, short = await _documents(probe, run_ids, w.documented())
    statuses: dict[str, int] = {}
    dispatch: list[float] = []
    for d in docs:
        statuses[d["status"]] = statuses.get(d["status"], 0) + 1
        for st in d["steps"]:
            q, s = _epoch(st.get("queuedAt")), _epoch(st.get("startedAt"))
            if q is not None and s is not None:
                # The documents' times have millisecond resolution: keep whole milliseconds.
                dispatch.append(round(s - q, 3))

    figures: dict[str, float | None] = {
        "accept_s": max(s.accept_s for s in subs),
        "succeeded": 1.0 if statuses == {"succeeded": len(run_ids)} else 0.0,
    }
    if not w.accept_only:
        figures.update(
            {
                "wall_s": wall,
                "steps_per_s": w.steps / wall if wall else None,
                "runs_per_s": len(run_ids) / wall if wall else None,
                "run_p50_ms": _ms(percentile(per_run, 50)),
                "run_p99_ms": _ms(percentile(per_run, 99)),
                "dispatch_p50_ms": _ms(percentile(dispatch, 50)),
                "dispatch_p99_ms": _ms(percentile(dispatch, 99)),
            }
        )
    extra: dict[str, Any] = {
        "statuses": statuses,
        "accept_http_status": sorted({s.status for s in subs}),
        "steps_in_documents": sum(len(d["steps"]) for d in docs),
        "short_document_reads": short,
    }

    if watch is not None:
        # Server-side: the queued record stored in KV -> the attempt's acceptance stored (its
        # first heartbeat, or the outcome a short step's answer travels with: then the
        # figure includes the command's own run).
        await watch.stop()
        times = watch.times
        server = [
            t_accepted - t_queued
            for (step, attempt, status), t_queued in times.items()
            if status == "queued"
            and (t_accepted := times.get((step, attempt, "accepted"))) is not None
        ]
        figures["server_ready_accepted_p50_ms"] = _ms(percentile(server, 50))
        figures["server_ready_accepted_p99_ms"] = _ms(percentile(server, 99))
        extra["server_samples"] = len(server)

    if w.kind == "foreach" and not w.accept_only:
        figures["expansion_ms"] = _ms(_expansion(docs[0]))

    if w.kind == "logs":
        span = await _log_span(probe, run_ids[0], w.lines)
        extra["log_span"] = span
        seconds = span["last"] - span["first"]
        figures["lines_in_stream"] = float(span["lines"])
        figures["lines_per_s"] = span["lines"] / seconds if seconds > 0 else None

    if w.kind == "diamonds" and not w.accept_only:
        # The same diamonds one at a time: a run's latency on an otherwise idle system.
        alone: list[float] = []
        for _ in range(ALONE_RUNS):
            _ids, s1, e1 = await _submit_and_wait(
                probe, f"alone{rep}", [w.runs[0]], timeout, cancel=False
            )
            alone.append(e1[0] - s1[0].started)
        figures["alone_p50_ms"] = _ms(percentile(alone, 50))
        figures["alone_p99_ms"] = _ms(percentile(alone, 99))
        _ids, subs2, ends2 = await _submit_and_wait(
            probe, f"paced{rep}", w.runs, timeout, cancel=False, interval=1 / PACED_RATE
        )
        paced = [end - sub.started for sub, end in zip(subs2, ends2, strict=True)]
        figures["paced_p50_ms"] = _ms(percentile(paced, 50))
        figures["paced_p99_ms"] = _ms(percentile(paced, 99))
    return {
        "figures": figures,
        "cpu_s": counter_delta(before, after, "cpu_s"),
        "sleeps": counter_delta(before, after, "sleeps"),
        "extra": extra,
    }


def _expansion(doc: dict[str, Any]) -> float | None:
    """A loop's expansion, as its run shows it: from the end of the step it loops over to
    the first instance's start (its instances' records are stored before any is sent)."""
    steps = {s["id"]: s for s in doc["steps"]}
    root_end = _epoch(steps["root"].get("finishedAt"))
    starts = [
        t for s in doc["steps"] if "[" in s["id"] and (t := _epoch(s.get("startedAt"))) is not None
    ]
    if root_end is None or not starts:
        return None
    return min(starts) - root_end


ALONE_RUNS = 20
# The throughput target for diamonds-200, as a steady arrival rate: the same runs
# submitted one every 20 ms, the latency a run gets at that load rather than in a burst.
PACED_RATE = 50.0


async def _log_span(probe: Probe, run_id: str, lines: int) -> dict[str, Any]:
    """The attempt's log as stored, once the stream has taken every line (the stream takes
    core publishes asynchronously, so it may trail the run's end a little). Lines, not
    messages: a message holds a chunk of lines."""
    deadline = time.monotonic() + 10
    last_count = -1
    while True:
        span = await probe.log_span(run_id, "seq")
        if span["lines"] >= lines or time.monotonic() > deadline:
            return span
        if span["lines"] == last_count:
            await asyncio.sleep(0.5)
            span = await probe.log_span(run_id, "seq")
            if span["lines"] == last_count:
                return span
        last_count = span["lines"]
        await asyncio.sleep(0.1)


async def run_workload(
    w: Workload,
    reps: int,
    say: Say,
    settings: dict[str, str] | None = None,
    ends: str = "events",
    orchestrators: int = 1,
) -> dict[str, Any]:
    """A fresh stack with the workload's runners; ``reps`` repetitions of baseline, then
    Heddle; the stack's peak RSS at the end."""
    timeout = max(60.0, w.steps * 0.05 + w.lines / 5000)
    stack = BenchStack(
        runners=w.runners, settings=dict(settings or {}), orchestrators=orchestrators
    )
    t0 = time.monotonic()
    stack.start()
    probe = stack.probe(ends)
    out: dict[str, Any] = {
        "workload": w.name,
        "mode": "accept, then cancel" if w.accept_only else "run",
        "kind": w.kind,
        "runners": w.runners,
        "orchestrators": orchestrators,
        "ends": ends,
        "runs": len(w.runs),
        "steps": w.steps,
        "reps": [],
    }
    try:
        await stack.wait_ready()
        out["stack_start_s"] = time.monotonic() - t0
        await probe.open()
        # One small run first: connections, consumers and caches warm, as in steady use.
        warm = new_run_id("warmup")
        fut = probe.expect(warm)
        await probe.submit(warm, [{"id": "w", "command": "true"}])
        await asyncio.wait_for(fut, 30)
        for rep in range(reps):
            bfig: dict[str, float | None] = {}
            if not w.accept_only and w.kind != "behind":  # behind: Heddle's turns alone
                bfig = baseline_figures(w, await run_baseline(w.baseline or w.runs, w.runners))
            if w.kind == "logs":
                devnull = [[{"id": "seq", "command": f"seq 1 {w.lines} > /dev/null"}]]
                bfig["devnull_wall_s"] = (await run_baseline(devnull, 1))["wall"]
            if w.kind == "diamonds" and not w.accept_only:
                alone = await run_baseline([w.runs[0]] * ALONE_RUNS, w.runners, one_by_one=True)
                bfig["alone_p50_ms"] = _ms(percentile(alone["run_done"], 50))
                bfig["alone_p99_ms"] = _ms(percentile(alone["run_done"], 99))
                paced = await run_baseline(w.runs, w.runners, interval=1 / PACED_RATE)
                bfig["paced_p50_ms"] = _ms(percentile(paced["run_done"], 50))
                bfig["paced_p99_ms"] = _ms(percentile(paced["run_done"], 99))
            h = await measure_heddle(w, probe, stack, rep, timeout)
            h["baseline"] = bfig
            out["reps"].append(h)
            say(f"  {w.name} rep {rep + 1}/{reps}: {_brief(h['figures'], bfig)}")
        if w.kind in COUNTED and not w.accept_only:
            out["messages_per_step"] = await count_messages(w, stack, probe, timeout)
        out["peak_rss_mb"] = {n: s.peak_rss_mb for n, s in stack.samples().items()}
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["logs"] = {n: stack.tail(n, 1500) for n in stack.services}
        say(f"  {w.name}: ERROR {out['error']}")
    finally:
        await probe.close()
        stack.stop()
    return out


async def count_messages(
    w: Workload, stack: BenchStack, probe: Probe, timeout: float
) -> dict[str, dict[str, float]]:
    """The workload's runs once more under the tap: messages per step, by service and kind."""
    tap = Settings(nats_url=stack.nats_url, nats_user=TAP.name, nats_password=TAP.password)

    async def run() -> None:
        await _submit_and_wait(probe, f"count-{w.kind}", w.runs, timeout, cancel=False)

    return await count_pass(tap, stack.monitor_url, w.steps, run)


def _brief(f: dict[str, float | None], b: dict[str, float | None]) -> str:
    if f.get("small_run_ms") is not None:
        return f"small run behind the big one: {f['small_run_ms']:.0f} ms"
    if f.get("wall_s") is None:
        return f"accepted in {f['accept_s']:.3f}s"
    text = f"heddle {f['wall_s']:.3f}s ({f['steps_per_s']:.0f} steps/s)"
    if b.get("wall_s"):
        text += f", baseline {b['wall_s']:.3f}s ({b['steps_per_s']:.0f} steps/s)"
    return text
