"""The notifier's bound per target host (services/gateway/notify/notifier.py): a host's
sends beyond its limit wait, another host's go ahead, and a host is forgotten once idle."""

from __future__ import annotations

import asyncio

from heddle.services.gateway.notify.notifier import HostLimits


async def test_a_busy_host_waits_alone_and_is_forgotten_once_idle() -> None:
    limits = HostLimits(2)
    release = asyncio.Event()
    inside: list[str] = []

    async def send(host: str) -> None:
        async with limits.hold(host):
            inside.append(host)
            if host == "slow:443":
                await release.wait()

    slow = [asyncio.create_task(send("slow:443")) for _ in range(3)]
    await asyncio.sleep(0)
    assert len(limits) == 1
    await send("fast:443")  # not held up by the slow host's sends
    assert inside == ["slow:443", "slow:443", "fast:443"]  # the third slow one waits
    release.set()
    await asyncio.gather(*slow)
    assert inside.count("slow:443") == 3
    assert len(limits) == 0
