"""``python -m bench.floor``: the least CPU a fan-out step can cost while Heddle keeps its
guarantees, measured part by part on this machine, against what fanout-1000 at 0.60x of
the baseline leaves for it.

A fan-out step needs, whatever the code around it (docs/performance.md, "Where a step's
cost goes"): its command spawned as the step user in a fresh working directory, its exit
and output read; the outcome stored and acknowledged, then delivered to the orchestrator and
acknowledged, and its live copy heard by the dispatcher; its state recorded twice
(``queued``, ``succeeded``), each acknowledged; the ready message stored, delivered to a
dispatcher and acknowledged; the offer to a runner. Each part runs alone, LANES at a time as
8 runners would, in processes of its own (bench/floor_parts.py), against a nats-server
configured as ``heddle up``'s: its accounts and users, Heddle's streams and buckets. Each
process connects as the user whose work it does (a runner's in the runners' account, the
orchestrator's, the dispatcher's), and does nothing else of Heddle's: no decision, no log
line, no bookkeeping. The floor is the sum; the services' real cost is ``make bench``'s CPU
per step.

Where this process is not root the steps run as its own user, without the launcher, and the
floor reads lower than a stack of root's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
from heddle.services.gateway.http.submit import new_run_id
from heddle.services.local.embedded_nats import EmbeddedNats, free_port, machine_go_threads
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

from bench.floor_parts import CONSUMER
from bench.harness import run_baseline
from bench.processes import REPO, StackAuth
from bench.procfs import proc_sample
from bench.step_uids import BLOCK, StepUidBlock
from bench.workloads import fanout

TARGET = 0.60  # fanout-1000 against the baseline (docs/performance.md)
# What a fan-out step needs of each part, as often as it needs it: {process of the part: the
# service that does it in Heddle}. The outcome's part has the dispatcher hear its live copy
# too; each part's nats-server CPU is nats-server's.
STEP: tuple[tuple[str, dict[str, str]], ...] = (
    ("spawn", {"spawn": "runners", "launchers": "launchers"}),
    ("outcome", {"publish": "runners", "consume": "orchestrator", "hear": "dispatcher"}),
    ("ready", {"publish": "orchestrator", "consume": "dispatcher"}),
    ("records", {"put": "orchestrator"}),  # queued
    ("records", {"put": "orchestrator"}),  # succeeded
    ("offer", {"send": "dispatcher", "hear": "runners"}),
)
SERVICES = ("runners", "launchers", "orchestrator", "dispatcher", "nats-server")
# Who does what: the services' own users, and each runner's in the runners' account.
ORCHESTRATOR, DISPATCHER = perms.ORCHESTRATOR, perms.DISPATCHER
SETUP = perms.User("heddle-floor", secrets.token_urlsafe(24), perms.Permissions((">",), (">",)))


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
    def __init__(
        self, server: EmbeddedNats, auth: StackAuth, count: int, lanes: int, first_uid: int
    ) -> None:
        assert server.proc is not None
        self.server, self.pid, self.auth = server, server.proc.pid, auth
        self.first_uid = first_uid  # the spawn part's step uids: first_uid + its lane
        self.count, self.lanes = count, lanes
        self.run_id = new_run_id()

    def part(
        self, user: str, part: str, count: int, lanes: int, arg: str = ""
    ) -> subprocess.Popen[str]:
        """One part's process, connected as ``user``."""
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "FLOOR_USER": user,
            "FLOOR_PASSWORD": self.auth.users.passwords[user],
            "FLOOR_RUN": self.run_id,
            "FLOOR_FIRST_UID": str(self.first_uid),
        }
        argv = [sys.executable, "-m", "bench.floor_parts", part, self.server.url]
        argv += [str(count), str(lanes), arg]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)

    def listening(self, user: str, part: str, count: int, arg: str) -> subprocess.Popen[str]:
        proc = self.part(user, part, count, 1, arg)
        wait_ready(proc)
        return proc

    def server_cpu(self) -> float:
        sample = proc_sample(self.pid)
        assert sample is not None
        return sample.cpu_s

    def measured(self, parts: list[subprocess.Popen[str]]) -> dict[str, float]:
        """ms of CPU per step, summed by kind of process, with nats-server's over the span."""
        before = self.server_cpu()
        results = [result_of(p) for p in parts]
        server = self.server_cpu() - before
        out: dict[str, float] = {}
        for proc, r in zip(parts, results, strict=True):
            for key, kind in (("cpu_s", str(proc.args[3])), ("launchers_cpu_s", "launchers")):
                if key in r:
                    out[kind] = out.get(kind, 0.0) + r[key] / self.count * 1000
            if "commands_cpu_s" in r:
                out["commands"] = out.get("commands", 0.0) + r["commands_cpu_s"] / self.count * 1000
        out["nats-server"] = server / self.count * 1000
        return out

    def by_runner(self, part: str, arg: Callable[[int], str]) -> list[subprocess.Popen[str]]:
        """``part`` in one process per runner, each as that runner's own user."""
        each = self.count // self.lanes
        return [
            self.part(perms.runner_user(f"runner-{i}"), part, each, 1, arg(i))
            for i in range(self.lanes)
        ]

    def spawn(self) -> dict[str, float]:
        return self.measured(self.by_runner("spawn", str))

    def outcome(self) -> dict[str, float]:
        taker = self.listening(ORCHESTRATOR, "consume", self.count, names.EVENTS_STREAM)
        live = self.listening(DISPATCHER, "hear", self.count, names.EVT_FINISHED_ALL)
        return self.measured([*self.by_runner("publish", lambda i: f"runner-{i}"), taker, live])

    def ready(self) -> dict[str, float]:
        taker = self.listening(DISPATCHER, "consume", self.count, names.STEPS_STREAM)
        maker = self.part(ORCHESTRATOR, "publish", self.count, self.lanes, "ready")
        return self.measured([maker, taker])

    def records(self) -> dict[str, float]:
        return self.measured([self.part(ORCHESTRATOR, "put", self.count, self.lanes)])

    def offer(self) -> dict[str, float]:
        each = self.count // self.lanes
        hearers = [
            self.listening(
                perms.runner_user(f"runner-{i}"), "hear", each, f"heddle.runner.runner-{i}.>"
            )
            for i in range(self.lanes)
        ]
        return self.measured([self.part(DISPATCHER, "send", self.count, self.lanes), *hearers])


async def make_streams(url: str) -> None:
    """Heddle's streams and buckets (shared/broker/resources.py), and a ``floor`` consumer
    of the events and of the ready steps."""
    nc = await nats.connect(url, user=SETUP.name, password=SETUP.password)
    await ensure_resources(nc, Settings.from_env({}))
    js = nc.jetstream()
    for stream in (names.EVENTS_STREAM, names.STEPS_STREAM):
        await js.add_consumer(stream, durable_name=CONSUMER, ack_policy="explicit")
    await nc.close()


def baseline(count: int, lanes: int) -> dict[str, float]:
    """The baseline executor on fanout-N: steps/s and its CPU per step, commands included
    (its process and theirs, reaped: this process's children's)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    b = asyncio.run(run_baseline([fanout(count)], lanes))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"steps_per_s": b["steps"] / b["wall"], "cpu_ms": cpu / b["steps"] * 1000}


def measure(count: int, lanes: int) -> dict[str, Any]:
    if not 0 < lanes <= BLOCK:
        raise SystemExit(f"--lanes: 1 to {BLOCK} (a block of step uids)")
    with tempfile.TemporaryDirectory(prefix="heddle-floor-") as tmp:
        runners = [f"runner-{i}" for i in range(lanes)]
        auth = StackAuth.create(Path(tmp), runners, extra=(SETUP,))
        server = EmbeddedNats(
            Path(tmp) / "nats",
            port=free_port(),
            log_file=Path(tmp) / "nats.log",
            config=auth.users.config_path,
            go_threads=machine_go_threads(0),  # as `heddle up` starts it
        )
        # Step uids no other stack's runner holds: a launcher kills every process of its uid.
        uids = StepUidBlock()
        server.start()
        try:
            asyncio.run(make_streams(server.url))
            floor = Floor(server, auth, count, lanes, uids.first)
            parts = {
                "spawn": floor.spawn(),
                "outcome": floor.outcome(),
                "ready": floor.ready(),
                "records": floor.records(),
                "offer": floor.offer(),
            }
        finally:
            server.stop()
            uids.release()
    return {"parts": parts, "baseline": baseline(count, lanes), "cores": os.cpu_count() or 1}


def by_service(parts: dict[str, dict[str, float]]) -> dict[str, float]:
    """The floor of a fan-out step, ms of CPU, by the service that would pay it."""
    floor = dict.fromkeys(SERVICES, 0.0)
    for part, roles in STEP:
        measured = parts[part]
        for process, service in roles.items():
            floor[service] += measured[process]
        floor["nats-server"] += measured["nats-server"]
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
