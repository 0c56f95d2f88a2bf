"""heddle-secrets, where the webhooks' and notify targets' secrets are kept, is the
gateway's alone: on a real nats-server with the configuration shared/broker/nats_permissions.py
generates, every other user's attempt to read a secret, by a get, a consumer or a live
subscription, is refused, and the gateway reads and writes it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import nats
import pytest
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

from tests.support.permission_server import Server, permission_server
from tests.support.stack import SUPERUSER, SUPERUSER_PASSWORD

API = perms.API
STREAM = names.kv_stream(names.SECRETS_BUCKET)
KEY = names.secret_key("deploy", "hook", "push")
SUBJECT = names.kv_subject(names.SECRETS_BUCKET, KEY)
RUNNER = "runner-2"
NAMESPACE_INSPECTOR = perms.namespace_inspector_user("team-a")
OTHERS = (
    "orchestrator",
    "dispatcher",
    perms.runner_user(RUNNER),
    "inspector",
    NAMESPACE_INSPECTOR,
)
# Each way to read a stored value: a direct get, a stream get, a consumer (a KV watch).
READS = {
    "direct get": (f"{API}.DIRECT.GET.{STREAM}.{SUBJECT}", {}),
    "direct get, by body": (f"{API}.DIRECT.GET.{STREAM}", {"last_by_subj": SUBJECT}),
    "stream get": (f"{API}.STREAM.MSG.GET.{STREAM}", {"last_by_subj": SUBJECT}),
    "consumer": (
        f"{API}.CONSUMER.CREATE.{STREAM}",
        {"stream_name": STREAM, "config": {"ack_policy": "none", "deliver_subject": "_INBOX.x"}},
    ),
    "snapshot": (f"{API}.STREAM.SNAPSHOT.{STREAM}", {"deliver_subject": "_INBOX.x"}),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with every user and Heddle's buckets, a secret stored: one for the module
    (its tests change nothing but the secret's value)."""
    tmp = tmp_path_factory.mktemp("secrets")
    with permission_server(tmp, [RUNNER], _prepare, namespace_inspectors=("team-a",)) as s:
        yield s


async def _prepare(url: str) -> None:
    async with await nats.connect(url, user=SUPERUSER, password=SUPERUSER_PASSWORD) as nc:
        res = await ensure_resources(nc, Settings(nats_url=url))
        await res.kv[names.SECRETS_BUCKET].put(KEY, b"the-secret")


@pytest.mark.parametrize("user", OTHERS)
@pytest.mark.parametrize("read", READS)
async def test_no_other_user_reads_a_secret(server: Server, user: str, read: str) -> None:
    subject, body = READS[read]
    client = await server.login(user)
    try:
        with pytest.raises(nats.errors.TimeoutError):  # dropped: no answer, no value
            await client.nc.request(subject, json.dumps(body).encode(), timeout=0.5)
        await client.refused(f'permissions violation for publish to "{subject.lower()}"')
    finally:
        await client.nc.close()


@pytest.mark.parametrize("user", OTHERS)
async def test_no_other_user_watches_a_secret_written(server: Server, user: str) -> None:
    client = await server.login(user)
    gateway = await server.login("gateway")
    try:
        seen: asyncio.Queue[object] = asyncio.Queue()
        await client.nc.subscribe(f"$KV.{names.SECRETS_BUCKET}.>", cb=seen.put)
        await client.nc.flush()
        await client.refused("permissions violation for subscription")
        kv = await gateway.nc.jetstream().key_value(names.SECRETS_BUCKET)
        await kv.put(KEY, f"made-for-{user}".encode())
        await client.nc.flush()
        await gateway.nc.flush()
        await asyncio.sleep(0.1)  # what a live subscription would have received by now
        assert seen.empty()
    finally:
        await client.nc.close()
        await gateway.nc.close()


async def test_the_gateway_reads_and_writes_secrets(server: Server) -> None:
    client = await server.login("gateway")
    try:
        kv = await client.nc.jetstream(timeout=10).key_value(names.SECRETS_BUCKET)
        await kv.put(names.secret_key("deploy", "notify", "0"), b"another")
        assert (await kv.get(names.secret_key("deploy", "notify", "0"))).value == b"another"
        assert (await kv.get(KEY)).value is not None
    finally:
        await client.nc.close()
    assert client.errors == []
