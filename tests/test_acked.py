"""shared/broker/acked.py against a real nats-server: acknowledgements matched to their messages,
the server's errors raised as nats-py types them, nothing left behind by a caller that stops
waiting, and no wait for an acknowledgement that a dropped connection took with it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import nats
import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.wire.errors import AcknowledgementLost
from nats.aio.client import Client
from nats.js.errors import BadRequestError, KeyWrongLastSequenceError, NoStreamResponseError

from tests.stack import freeze


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    await client.jetstream().add_stream(name="T", subjects=["t.>"])
    # The server may bring back what the last test's T held (deleted just before, same
    # name, on a loaded machine): counts here start from nothing.
    await client.jetstream().purge_stream("T")
    yield client
    await client.close()


async def test_each_acknowledgement_resolves_its_own_message(nc: Client) -> None:
    acked = await AckedPublisher(nc).start()
    futures = [await acked.publish(f"t.{i % 3}", f"m{i}".encode()) for i in range(200)]
    acks = [json.loads(a) for a in await asyncio.gather(*futures)]
    assert [a["seq"] for a in acks] == list(range(1, 201))
    assert {a["stream"] for a in acks} == {"T"}
    assert acked.in_flight == 0
    stored = await nc.jetstream().get_msg("T", seq=117)
    assert stored.data == b"m116"


async def test_the_servers_error_is_raised_as_nats_py_types_it(nc: Client) -> None:
    acked = await AckedPublisher(nc).start()
    await (await acked.publish("t.k", b"first"))
    second = await acked.publish(
        "t.k", b"second", headers={"Nats-Expected-Last-Subject-Sequence": "0"}
    )
    with pytest.raises(KeyWrongLastSequenceError) as info:  # a BadRequestError, as kv's
        await second
    assert isinstance(info.value, BadRequestError)
    assert "wrong last sequence" in str(info.value)
    nowhere = await acked.publish("elsewhere.x", b"lost")
    with pytest.raises(NoStreamResponseError):
        await asyncio.wait_for(nowhere, 5)


async def test_a_caller_that_stops_waiting_leaves_nothing_behind(nc: Client) -> None:
    acked = await AckedPublisher(nc).start()
    future = await acked.publish("t.a", b"x")
    future.cancel()
    await asyncio.sleep(0.2)  # its acknowledgement arrives for no one
    assert acked.in_flight == 0
    assert (await nc.jetstream().stream_info("T")).state.messages == 1


async def test_a_lost_connection_fails_what_awaits_its_acknowledgement(
    own_nats_server: EmbeddedNats,
) -> None:
    """A broker killed while a write waits for its acknowledgement: the write fails as soon
    as the connection drops (its writer sends it again), instead of waiting out a timeout;
    what is published after the drop is acknowledged once the broker is back."""
    acked: AckedPublisher | None = None

    async def disconnected() -> None:
        assert acked is not None
        acked.lost()

    client = await nats.connect(
        own_nats_server.url, disconnected_cb=disconnected, reconnect_time_wait=0.2
    )
    try:
        await client.jetstream().add_stream(name="T", subjects=["t.>"])
        acked = await AckedPublisher(client).start()
        assert own_nats_server.proc is not None
        freeze(own_nats_server.proc.pid)  # it reads nothing, answers nothing
        waiting = await acked.publish("t.a", b"x")
        await asyncio.sleep(0.2)
        assert not waiting.done()
        own_nats_server.kill()
        with pytest.raises(AcknowledgementLost, match=r"before t\.a was acknowledged"):
            await asyncio.wait_for(waiting, 5)
        assert acked.in_flight == 0
        again = await acked.publish("t.a", b"x")  # buffered while the broker is away
        own_nats_server.start()
        assert json.loads(await asyncio.wait_for(again, 10))["stream"] == "T"
    finally:
        await client.close()
