"""The last line a service's NATS connection logs as it closes (shared/broker/nats_io.py), on a real
nats-server: the messages and bytes it carried, both ways. The shape of every log line:
tests/unit/shared/runtime/test_service_logging.py."""

from __future__ import annotations

import nats
from heddle.shared.broker.nats_io import close
from heddle.shared.runtime.service import setup_logging
from heddle.shared.runtime.settings import Settings

from tests.support.service_logs import logged as logged  # the fixture


async def test_closing_a_connection_logs_what_it_carried(logged, nats_server) -> None:
    """The last line of a service's NATS connection: its messages and bytes, both ways."""
    setup_logging(Settings())
    nc = await nats.connect(nats_server.url)
    sub = await nc.subscribe("heddle.test.carried")
    for n in range(5):
        await nc.publish("heddle.test.carried", b"x" * n)
    assert [(await sub.next_msg(timeout=5)).data for _ in range(5)] == [b"x" * n for n in range(5)]
    await close(nc)
    (line,) = [line for line in logged() if line["msg"] == "nats closed"]
    assert line["logger"] == "heddle.nats"
    assert (line["messages_in"], line["messages_out"]) == (5, 5)
    assert (line["bytes_in"], line["bytes_out"]) == (10, 10)
    assert line["reconnects"] == 0
