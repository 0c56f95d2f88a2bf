"""Notifications when things fail (docs/notifications.md): a target that is down gets its
attempts recorded while the run ends regardless, and is delivered to once it is up, across
a gateway killed and started again; a gateway stopped mid-send finishes that send first;
two gateways send each delivery once.
The happy path: tests/integration/test_notifications.py."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import aiohttp
from heddle.services.local.embedded_nats import free_port

from tests.support.metrics import parse, value
from tests.support.receivers import Receiver
from tests.support.stack import Stack, StackFactory, eventually, until

QUICK = {"HEDDLE_NOTIFY_BACKOFF": "0.3", "HEDDLE_NOTIFY_TIMEOUT": "2"}
FAILING = [{"id": "bad", "command": "exit 1"}]


async def notification(s: Stack, run_id: str) -> dict[str, Any]:
    """The run's first notify target as its document shows it (the gateway may be starting)."""
    try:
        status, body = await s.request("GET", f"/api/runs/{run_id}")
    except aiohttp.ClientError:
        return {"state": None, "attempts": []}
    return body["notifications"][0] if status == 200 else {"state": None, "attempts": []}


async def until_state(s: Stack, run_id: str, state: str) -> dict[str, Any]:
    """The run's first target once its delivery is in ``state``."""

    async def reached() -> bool:
        return (await notification(s, run_id))["state"] == state

    await eventually(reached, f"run {run_id}'s delivery {state}")
    return await notification(s, run_id)


async def until_attempts(s: Stack, run_id: str, count: int) -> dict[str, Any]:
    """The run's first target once ``count`` attempts are recorded."""

    async def tried() -> bool:
        return len((await notification(s, run_id))["attempts"]) >= count

    await eventually(tried, f"{count} attempts at run {run_id}'s target")
    return await notification(s, run_id)


async def restart_gateway(s: Stack, sig: int = signal.SIGKILL) -> None:
    s.kill("gateway", sig)
    await until(lambda: not s.procs["gateway"].alive(), 20, "the gateway stopped")
    s.start("gateway")


async def answer_once_stopping(s: Stack, receiver: Receiver) -> None:
    """Let the receiver answer once the gateway says it is stopping."""
    await until(lambda: '"msg":"stopping"' in s.logs("gateway"), 20, "the gateway stopping")
    assert receiver.hold is not None
    receiver.hold.set()


async def test_a_target_down_is_retried_and_delivered_once_across_a_gateway_kill(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1, **QUICK)
    receiver = Receiver()  # its port chosen, nothing listening yet
    run_id = await s.submit({"notify": [{"url": receiver.url}], "steps": FAILING})
    run = await s.wait_run(run_id)
    assert run["status"] == "failed"  # ended, its notification still undelivered

    shown = await until_attempts(s, run_id, 2)
    assert shown["state"] == "pending"
    assert all(a["status"] is None and a["error"] for a in shown["attempts"]), shown
    await receiver.start()
    try:
        await restart_gateway(s)
        shown = await until_state(s, run_id, "delivered")
        assert shown["attempts"][-1]["status"] == 200
        assert len(receiver.of_run(run_id)) == 1
    finally:
        await receiver.stop()


async def test_a_gateway_stopped_mid_send_lets_it_finish_and_it_is_not_sent_again(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1, **QUICK)
    receiver = await Receiver(hold=asyncio.Event()).start()
    try:
        run_id = await s.submit({"notify": [{"url": receiver.url}], "steps": FAILING})
        await until(lambda: len(receiver.deliveries) == 1, 30, "the delivery sent")
        answered = asyncio.create_task(answer_once_stopping(s, receiver))
        # SIGTERM while its POST waits for the answer (``kill`` waits for the process).
        await asyncio.to_thread(s.kill, "gateway", signal.SIGTERM)
        await answered
        s.start("gateway")
        assert len((await until_state(s, run_id, "delivered"))["attempts"]) == 1
        assert len(receiver.of_run(run_id)) == 1
    finally:
        await receiver.stop()


async def test_two_gateways_send_each_delivery_once(stack: StackFactory) -> None:
    """Both follow every delivery; the claim (compare-and-set) lets one of them send it."""
    s = await stack(runners=2, **QUICK)
    s.start("gateway-1", "gateway", HEDDLE_GATEWAY_PORT=str(free_port()))
    await until(lambda: '"msg":"listening' in s.logs("gateway-1"), 30, "gateway-1 listening")
    receiver = await Receiver().start()
    try:
        notify = [{"url": receiver.url}]
        runs = [await s.submit({"notify": notify, "steps": FAILING}) for _ in range(6)]
        for run_id in runs:
            assert len((await until_state(s, run_id, "delivered"))["attempts"]) == 1
        sent = sorted(d.headers["X-Heddle-Delivery"] for d in receiver.deliveries)
        assert sent == sorted(f"{run_id}.0" for run_id in runs)
    finally:
        await receiver.stop()


async def test_a_redirect_is_not_followed_and_a_later_2xx_delivers(stack: StackFactory) -> None:
    s = await stack(runners=1, **QUICK)
    receiver = await Receiver(status=302).start()
    try:
        run_id = await s.submit({"notify": [{"url": receiver.url}], "steps": FAILING})
        shown = await until_attempts(s, run_id, 2)
        assert shown["state"] == "pending"
        assert {a["status"] for a in shown["attempts"]} == {302}
        assert all("redirects are not followed" in a["error"] for a in shown["attempts"])
        receiver.status = 200
        attempts = (await until_state(s, run_id, "delivered"))["attempts"]
        assert attempts[-1]["status"] == 200 and len(attempts) == len(receiver.of_run(run_id))
        assert receiver.followed == 0
        status, text = await s.request("GET", "/metrics")
        assert status == 200
        counted = parse(text)
        assert value(counted, "heddle_notify_attempts_total", outcome="delivered") == 1
        failed = value(counted, "heddle_notify_attempts_total", outcome="failed")
        assert failed == len(attempts) - 1
    finally:
        await receiver.stop()
