"""``python -m bench.floor``: the least CPU a fan-out step can cost while Heddle keeps its
guarantees, measured part by part on this machine, against what fanout-1000 at 0.60x of
the baseline leaves for it.

A fan-out step needs, whatever the code around it (docs/performance.md, "Where a step's
cost goes"): its command spawned as the step user in a fresh working directory, its exit
and output read; the outcome stored and acknowledged, then delivered to the orchestrator and
acknowledged; its state recorded twice (``queued``, ``succeeded``), each acknowledged; the
ready message stored, delivered to a dispatcher and acknowledged; the offer to a runner, and
the live copy of the outcome that frees the runner. Each part runs alone against one
nats-server, LANES at a time as 8 runners would, in processes of its own
(bench/floor_parts.py), with nothing else of Heddle's: no decision, no log line, no
bookkeeping. The floor is the sum; the services' real cost is ``make bench``'s CPU per step.

Where this process is not root the steps run as its own user, without the launcher, and the
floor reads lower than a stack of root's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import nats
from heddle.services.local.embedded_nats import EmbeddedNats, free_port

from bench.floor_parts import BUCKET, CONSUMER, STREAM, SUBJECTS
from bench.processes import REPO
from bench.procfs import proc_sample
from bench.workloads import fanout

TARGET = 0.60  # fanout-1000 against the baseline (docs/performance.md)
# What a fan-out step needs of each part: (part, what it stands for, {process of the part:
# the service that does it in Heddle}, the share of nats-server's CPU for the part that is
# the step's: a live copy rides on the outcome's publish, and costs the server its delivery).
STEP: tuple[tuple[str, str, dict[str, str], float], ...] = (
    ("spawn", "the command spawned", {"spawn": "runners", "launchers": "launchers"}, 1.0),
    ("outcome", "the outcome", {"publish": "runners", "consume": "orchestrator"}, 1.0),
    ("ready", "the ready message", {"publish": "orchestrator", "consume": "dispatcher"}, 1.0),
    ("records", "the queued record", {"put": "orchestrator"}, 1.0),
    ("records", "the succeeded record", {"put": "orchestrator"}, 1.0),
    ("core", "the offer", {"send": "dispatcher", "hear": "runners"}, 1.0),
    ("core", "the outcome's live copy", {"hear": "dispatcher"}, 0.5),
)
SERVICES = ("runners", "launchers", "orchestrator", "dispatcher", "nats-server")


def run_part(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "bench.floor_parts", *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)


def result_of(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{proc.args}: exit {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    if not json.loads(proc.stdout.readline()).get("ready"):
        raise RuntimeError(f"{proc.args}: not ready")


class Floor:
    def __init__(self, server: EmbeddedNats, count: int, lanes: int) -> None:
        assert server.proc is not None
        self.server, self.pid = server, server.proc.pid
        self.count, self.lanes = count, lanes

    def server_cpu(self) -> float:
        sample = proc_sample(self.pid)
        assert sample is not None
        return sample.cpu_s

    def measured(self, parts: list[subprocess.Popen[str]], per: int) -> dict[str, float]:
        """ms of CPU per unit, summed by kind of process, with nats-server's over the span."""
        before = self.server_cpu()
        results = [result_of(p) for p in parts]
        server = self.server_cpu() - before
        out: dict[str, float] = {}
        for proc, r in zip(parts, results, strict=True):
            for key, kind in (("cpu_s", str(proc.args[3])), ("launchers_cpu_s", "launchers")):
                if key in r:
                    out[kind] = out.get(kind, 0.0) + r[key] / per * 1000
            if "commands_cpu_s" in r:
                out["commands"] = out.get("commands", 0.0) + r["commands_cpu_s"] / per * 1000
        out["nats-server"] = server / per * 1000
        return out

    def in_processes(self, part: str) -> list[subprocess.Popen[str]]:
        """``part`` in one process per lane, as each runner is its own."""
        each = str(self.count // self.lanes)
        return [run_part(part, self.server.url, each, "1", str(i)) for i in range(self.lanes)]

    def spawn(self) -> dict[str, float]:
        return self.measured(self.in_processes("spawn"), self.count)

    def delivered(self, producers: list[subprocess.Popen[str]] | None = None) -> dict[str, float]:
        consumer = run_part("consume", self.server.url, str(self.count), "1")
        wait_ready(consumer)
        if producers is None:
            producers = [run_part("publish", self.server.url, *self.sizes())]
        return self.measured([*producers, consumer], self.count)

    def outcome(self) -> dict[str, float]:
        return self.delivered(self.in_processes("publish"))

    def records(self) -> dict[str, float]:
        return self.measured([run_part("put", self.server.url, *self.sizes())], self.count)

    def core(self) -> dict[str, float]:
        hearer = run_part("hear", self.server.url, str(self.count), "1")
        wait_ready(hearer)
        return self.measured([run_part("send", self.server.url, *self.sizes()), hearer], self.count)

    def sizes(self) -> tuple[str, str]:
        return str(self.count), str(self.lanes)


async def make_streams(url: str) -> None:
    """The events stream and a bucket, configured as Heddle's (shared/broker/resources.py)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=[SUBJECTS], duplicate_window=120)
    await js.add_consumer(STREAM, durable_name=CONSUMER, ack_policy="explicit")
    await js.add_stream(
        name=f"KV_{BUCKET}",
        subjects=[f"$KV.{BUCKET}.>"],
        max_msgs_per_subject=1,
        allow_rollup_hdrs=True,
        deny_delete=True,
        discard="new",
        duplicate_window=120,
        allow_direct=True,
    )
    await nc.close()


def baseline(count: int, lanes: int) -> dict[str, float]:
    """The baseline executor on fanout-N: steps/s and its CPU per step, commands included."""
    job = {"runs": [fanout(count)], "concurrency": lanes}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [sys.executable, "-m", "bench.baseline"],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    b = json.loads(out.stdout)
    return {"steps_per_s": b["steps"] / b["wall"], "cpu_ms": cpu / b["steps"] * 1000}


def measure(count: int, lanes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="heddle-floor-") as tmp:
        server = EmbeddedNats(Path(tmp) / "nats", port=free_port(), log_file=Path(tmp) / "nats.log")
        server.start()
        try:
            asyncio.run(make_streams(server.url))
            floor = Floor(server, count, lanes)
            parts = {
                "spawn": floor.spawn(),
                "outcome": floor.outcome(),
                "ready": floor.delivered(),
                "records": floor.records(),
                "core": floor.core(),
            }
        finally:
            server.stop()
    return {"parts": parts, "baseline": baseline(count, lanes), "cores": os.cpu_count() or 1}


def by_service(parts: dict[str, dict[str, float]]) -> dict[str, float]:
    """The floor of a fan-out step, ms of CPU, by the service that would pay it."""
    floor = dict.fromkeys(SERVICES, 0.0)
    for part, _, roles, server_share in STEP:
        measured = parts[part]
        for process, service in roles.items():
            floor[service] += measured[process]
        floor["nats-server"] += measured["nats-server"] * server_share
    return floor


def allowed(result: dict[str, Any]) -> float:
    """ms of CPU a fan-out step at TARGET x the baseline leaves Heddle's processes: the
    machine's cores over the steps per second, less the command's own."""
    command = result["parts"]["spawn"]["commands"]
    return result["cores"] / (TARGET * result["baseline"]["steps_per_s"]) * 1000 - command


def report(result: dict[str, Any]) -> str:
    parts, base = result["parts"], result["baseline"]
    lines = ["part    | ms of CPU per unit, by process"]
    for name, measured in parts.items():
        lines.append(f"{name:7} | " + ", ".join(f"{k} {v:.3f}" for k, v in measured.items()))
    floor = by_service(parts)
    lines += [
        "",
        "a fan-out step's floor, ms of CPU: " + ", ".join(f"{k} {v:.3f}" for k, v in floor.items()),
    ]
    lines += [
        f"baseline: {base['steps_per_s']:.0f} steps/s, {base['cpu_ms']:.3f} ms of CPU a step"
        f" (commands included); the command alone {parts['spawn']['commands']:.3f} ms",
        f"the floor of Heddle's processes for a fan-out step: {sum(floor.values()):.3f} ms",
        f"what fanout at {TARGET:.2f}x of the baseline leaves them on {result['cores']} cores:"
        f" {allowed(result):.3f} ms",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = measure(args.steps, args.lanes)
    print(report(result))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
