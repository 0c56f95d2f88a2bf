"""Metrics from every service, scraped over HTTP from a real stack and parsed as Prometheus
would: they move with a run, with a saturated pool, and with a NATS outage; and the cron
scheduler's, on a driven clock. The dashboard's metrics:
tests/unit/shared/runtime/test_metrics.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from heddle.shared.runtime.metrics import registry_for

from tests.support.metrics import Samples, parse, scrape, value
from tests.support.scheduling import MIN, Env
from tests.support.scheduling import env as env  # the fixture
from tests.support.stack import Stack, StackFactory

SERVICES = ("orchestrator", "dispatcher", "gateway", "runner-0", "runner-1")


async def scrape_all(s: Stack) -> dict[str, Samples]:
    return dict(zip(SERVICES, await asyncio.gather(*(scrape(s, n) for n in SERVICES)), strict=True))


async def eventually(
    s: Stack, check: Callable[[dict[str, Samples]], bool], timeout: float = 15.0
) -> dict[str, Samples]:
    """Scrape until ``check`` holds: a counter moves once the write it counts is stored,
    a moment after the API shows it."""
    deadline = time.monotonic() + timeout
    while True:
        got = await scrape_all(s)
        if check(got):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"metrics did not get there: {got}")
        await asyncio.sleep(0.1)


def attempts(got: dict[str, Samples], outcome: str) -> float:
    return sum(value(got[r], "heddle_attempts_total", outcome=outcome) for r in SERVICES[3:])


async def test_every_service_metrics_move_with_runs_and_outages(stack: StackFactory) -> None:
    s = await stack(runners=2, metrics=True)
    before = await scrape_all(s)
    steps = 5  # a diamond and a tail: A -> (B, C) -> D -> E
    doc = {
        "steps": [
            {"id": "A", "command": "true"},
            {"id": "B", "command": "sleep 0.2", "dependsOn": ["A"]},
            {"id": "C", "command": "true", "dependsOn": ["A"]},
            {"id": "D", "command": "true", "dependsOn": ["B", "C"]},
            {"id": "E", "command": "true", "dependsOn": ["D"]},
        ]
    }
    run = await s.wait_run(await s.submit(doc))
    assert run["status"] == "succeeded"

    def moved(got: dict[str, Samples]) -> bool:
        o, b = got["orchestrator"], before["orchestrator"]
        return (
            value(o, "heddle_steps_total", state="succeeded")
            - value(b, "heddle_steps_total", state="succeeded")
            == steps
            and value(o, "heddle_runs_total", status="succeeded")
            - value(b, "heddle_runs_total", status="succeeded")
            == 1
            # The runner's answer of a short step travels with its outcome: the dispatcher
            # may end its last lease just after the run ended.
            and value(got["dispatcher"], "heddle_runners_busy") == 0
        )

    after = await eventually(s, moved)
    o, b = after["orchestrator"], before["orchestrator"]
    delta = {
        state: value(o, "heddle_steps_total", state=state)
        - value(b, "heddle_steps_total", state=state)
        for state in ("pending", "queued", "succeeded", "failed")
    }
    # A, ready when the run is created, enters queued straight away, never pending.
    assert delta == {"pending": steps - 1, "queued": steps, "succeeded": steps, "failed": 0}
    assert (
        value(o, "heddle_runs_total", status="running")
        - value(b, "heddle_runs_total", status="running")
        == 1
    )
    # Every attempt's duration and its wait for a runner, from the step records.
    for name, labels in (
        ("heddle_step_duration_seconds_count", {"outcome": "succeeded"}),
        ("heddle_dispatch_latency_seconds_count", {"pool": "default"}),
    ):
        assert value(o, name, **labels) - value(b, name, **labels) == steps, name
    assert value(o, "heddle_step_duration_seconds_sum", outcome="succeeded") >= 0.2
    assert value(o, "heddle_live_runs") == 0
    assert ("heddle_waiting_runs", frozenset()) in o and value(o, "heddle_waiting_runs") == 0
    assert attempts(after, "succeeded") - attempts(before, "succeeded") == steps
    # The dispatcher's pool is the API's.
    _, pool = await s.request("GET", "/api/runners")
    d = after["dispatcher"]
    assert value(d, "heddle_runners") == pool["total"] == 2
    assert value(d, "heddle_runners_busy") == 0
    assert value(d, "heddle_ready_waiting") == 0
    # The gateway counts its requests, on its own port and on the API's /metrics alike.
    gw = after["gateway"]
    assert (
        value(gw, "heddle_http_requests_total", method="GET", route="/api/runs/{run}", status="200")
        >= 1
    )
    status, text = await s.request("GET", "/metrics")
    assert status == 200
    api = parse(text)
    assert (
        value(api, "heddle_http_requests_total", method="POST", route="/api/runs", status="201")
        == 1
    )
    assert value(api, "heddle_http_request_seconds_count", route="/api/runs") == 1
    # Each service shows its own metrics only, and the process's.
    assert not any(k[0].startswith("heddle_steps") for k in gw)
    assert not any(k[0].startswith("heddle_http") for k in o)
    assert all(value(after[n], "process_cpu_seconds_total") > 0 for n in SERVICES)

    # A saturated pool: two runners busy, two steps waiting for them.
    busy_run = await s.submit({"steps": [{"id": f"s{i}", "command": "sleep 1"} for i in range(4)]})
    await eventually(
        s,
        lambda got: (
            value(got["dispatcher"], "heddle_runners_busy") == 2
            and value(got["dispatcher"], "heddle_ready_waiting") == 2
        ),
    )
    await s.wait_run(busy_run)

    # A NATS outage: every service's connection comes back, and says so.
    assert s.nats is not None
    s.nats.kill()
    s.start_nats()

    def reconnected(got: dict[str, Samples]) -> bool:
        return all(
            value(got[n], "heddle_nats_reconnects_total", service=n.split("-")[0])
            > value(before[n], "heddle_nats_reconnects_total", service=n.split("-")[0])
            for n in SERVICES
        )

    await eventually(s, reconnected, timeout=30)


def counted(kind: str) -> float:
    sample = registry_for("orchestrator").get_sample_value(
        "heddle_cron_slots_total", {"kind": kind}
    )
    return sample or 0.0


async def test_cron_slots_fired_on_time_and_backfilled_after_downtime(env: Env) -> None:
    await env.register()
    sched = env.scheduler()
    fired, backfilled = counted("fired"), counted("backfilled")
    env.clock.advance(3 * MIN)
    assert await sched.tick() == 3  # each due since the scheduler's last look: on time
    assert (counted("fired") - fired, counted("backfilled") - backfilled) == (3, 0)
    # A scheduler that starts after 10 minutes of nobody scheduling runs them late.
    env.clock.advance(10 * MIN)
    late = env.scheduler()
    env.clock.advance(MIN)
    assert await late.tick() == 11
    assert (counted("fired") - fired, counted("backfilled") - backfilled) == (4, 10)


async def test_waiting_steps_are_counted_by_pool_and_reason(stack: StackFactory) -> None:
    s = await stack(runners=2, metrics=True, HEDDLE_WATCHDOG_SCAN="0.2", HEDDLE_RETRY_BASE="30")
    flaky = await s.submit({"steps": [{"id": "f", "command": "exit 1", "retries": 1}]})
    await s.wait_step(flaky, "f", {"retrying"})  # then 30 s of backoff
    gate = s.tmp / "gate"
    hold = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    busy = [{"id": f"b{i}", "command": hold} for i in range(4)]  # two run, two wait
    tpu = {"id": "tpu", "command": "true", "runsOn": ["tpu"]}  # no runner has the label
    run_id = await s.submit({"steps": [*busy, tpu]})

    def waiting(got: dict[str, Samples], service: str, pool: str, reason: str) -> float:
        return value(got[service], "heddle_waiting_steps", pool=pool, reason=reason)

    def placed(got: dict[str, Samples]) -> float:
        return value(got["orchestrator"], "heddle_dispatch_latency_seconds_count", pool="default")

    got = await eventually(
        s,
        lambda got: (
            waiting(got, "dispatcher", "default", "runners-busy") == 2
            and waiting(got, "orchestrator", "tpu", "no-runner") == 1
            and waiting(got, "orchestrator", "default", "backoff") == 1
            and placed(got) >= 3  # f's first attempt, b0 and b1
        ),
    )
    assert (
        value(
            got["orchestrator"], "heddle_waiting_oldest_seconds", pool="default", reason="backoff"
        )
        > 0
    )
    gate.touch()
    await s.request("POST", f"/api/runs/{flaky}/cancel")
    await s.request("POST", f"/api/runs/{run_id}/cancel")
    await s.wait_run(run_id)
    got = await eventually(
        s,
        lambda got: (
            waiting(got, "orchestrator", "tpu", "no-runner") == 0
            and waiting(got, "orchestrator", "default", "backoff") == 0
            and waiting(got, "dispatcher", "default", "runners-busy") == 0
        ),
    )
    # No run or step id in any label of the series.
    labels = {k for (name, pairs) in got["dispatcher"] for k, _ in pairs if "wait" in name}
    assert labels <= {"pool", "reason", "le"}
