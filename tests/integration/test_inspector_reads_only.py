"""Every JetStream call that changes state, against every NATS user without the right to it,
on a real nats-server with the configuration shared/broker/nats_permissions.py generates: the server
refuses each one. The inspector in particular creates no consumer of any kind (a create's body
can name a service's durable, make a durable or push to any subject: docs/security.md,
"NATS users and permissions"), and its reads still work."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import nats
import pytest
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from nats.js.api import ConsumerConfig

from tests.support.permission_server import Server, permission_server
from tests.support.stack import SUPERUSER, SUPERUSER_PASSWORD

API = perms.API
EVENTS, LOGS, STEPS, DOCS = (
    names.EVENTS_STREAM,
    names.LOGS_STREAM,
    names.STEPS_STREAM,
    names.DOCS_STREAM,
)
DURABLE = names.orch_events_durable(0)  # the orchestrator's own, as the attack rewrote it
RUNNER = "runner-2"
GATEWAY, ORCH, DISPATCHER, INSPECTOR = "gateway", "orchestrator", "dispatcher", "inspector"
USERS = (GATEWAY, ORCH, DISPATCHER, perms.runner_user(RUNNER), INSPECTOR)
KEEPERS = frozenset({GATEWAY, ORCH, DISPATCHER})  # create or update HEDDLE_EVENTS
EVENT_READERS = frozenset({ORCH, DISPATCHER})  # consumers on HEDDLE_EVENTS and HEDDLE_STEPS
ONLY_ORCH = frozenset({ORCH})  # the keeper of every stream: the whole JetStream API
PUSH = {"deliver_subject": names.runner_cancel(RUNNER), "ack_policy": "none"}


@dataclass(frozen=True)
class Verb:
    """A call that changes state, and the users the permission table gives it to."""

    subject: str
    may: frozenset[str]
    body: dict = field(default_factory=dict)
    headers: dict[str, str] | None = None


def _consumer(stream: str, **config: object) -> dict:
    return {"stream_name": stream, "config": {"ack_policy": "explicit", **config}}


VERBS = {
    "stream create": Verb(f"{API}.STREAM.CREATE.{EVENTS}", KEEPERS, {"name": EVENTS}),
    "stream update": Verb(f"{API}.STREAM.UPDATE.{EVENTS}", KEEPERS, {"name": EVENTS}),
    "stream create, another": Verb(f"{API}.STREAM.CREATE.X", ONLY_ORCH, {"name": "X"}),
    "stream delete": Verb(f"{API}.STREAM.DELETE.{EVENTS}", ONLY_ORCH),
    "stream purge": Verb(f"{API}.STREAM.PURGE.{EVENTS}", ONLY_ORCH),
    "stream purge, documents": Verb(f"{API}.STREAM.PURGE.{DOCS}", frozenset({GATEWAY, ORCH})),
    "message delete": Verb(f"{API}.STREAM.MSG.DELETE.{EVENTS}", ONLY_ORCH, {"seq": 1}),
    "snapshot": Verb(f"{API}.STREAM.SNAPSHOT.{EVENTS}", ONLY_ORCH, {"deliver_subject": "x.y"}),
    "restore": Verb(f"{API}.STREAM.RESTORE.X", ONLY_ORCH),
    "stream stepdown": Verb(f"{API}.STREAM.LEADER.STEPDOWN.{EVENTS}", ONLY_ORCH),
    "stream peer remove": Verb(f"{API}.STREAM.PEER.REMOVE.{EVENTS}", ONLY_ORCH),
    # The attack's first form: unnamed, its body naming the orchestrator's durable.
    "consumer create, unnamed": Verb(
        f"{API}.CONSUMER.CREATE.{EVENTS}",
        EVENT_READERS,
        _consumer(EVENTS, name=DURABLE, filter_subject="heddle.evt.x.>"),
    ),
    "consumer create, named": Verb(
        f"{API}.CONSUMER.CREATE.{EVENTS}.peek", EVENT_READERS, _consumer(EVENTS, name="peek")
    ),
    "consumer create, named with filter": Verb(
        f"{API}.CONSUMER.CREATE.{EVENTS}.peek.heddle.evt.r.s.finished.x",
        EVENT_READERS,
        _consumer(EVENTS, name="peek", filter_subject="heddle.evt.r.s.finished.x"),
    ),
    # The attack's second form: a named create whose body makes it durable.
    "consumer create, named durable": Verb(
        f"{API}.CONSUMER.CREATE.{EVENTS}.peek",
        EVENT_READERS,
        _consumer(EVENTS, name="peek", durable_name="peek"),
    ),
    "consumer create, durable": Verb(
        f"{API}.CONSUMER.DURABLE.CREATE.{EVENTS}.peek",
        EVENT_READERS,
        _consumer(EVENTS, durable_name="peek"),
    ),
    "consumer create, work queue": Verb(f"{API}.CONSUMER.CREATE.{STEPS}", EVENT_READERS),
    # The attack's third form: a push consumer delivering stored log lines to a runner.
    "consumer create, push": Verb(
        f"{API}.CONSUMER.CREATE.{LOGS}", frozenset({GATEWAY, ORCH}), _consumer(LOGS, **PUSH)
    ),
    "consumer delete": Verb(f"{API}.CONSUMER.DELETE.{EVENTS}.{DURABLE}", EVENT_READERS),
    "consumer pause": Verb(f"{API}.CONSUMER.PAUSE.{EVENTS}.{DURABLE}", ONLY_ORCH),
    "consumer unpin": Verb(f"{API}.CONSUMER.UNPIN.{EVENTS}.{DURABLE}", ONLY_ORCH),
    "consumer stepdown": Verb(f"{API}.CONSUMER.LEADER.STEPDOWN.{EVENTS}.{DURABLE}", ONLY_ORCH),
    "consumer next": Verb(f"{API}.CONSUMER.MSG.NEXT.{EVENTS}.{DURABLE}", EVENT_READERS),
    "account purge": Verb(f"{API}.ACCOUNT.PURGE.$G", ONLY_ORCH),
    "server remove": Verb(f"{API}.SERVER.REMOVE", ONLY_ORCH),
    "meta stepdown": Verb(f"{API}.META.LEADER.STEPDOWN", ONLY_ORCH),
    "kv put": Verb(names.kv_subject(names.RUNS_BUCKET, "run.r1"), ONLY_ORCH),
    "kv delete": Verb(
        names.kv_subject(names.RUNS_BUCKET, "run.r1"), ONLY_ORCH, headers={"KV-Operation": "DEL"}
    ),
    "kv purge": Verb(
        names.kv_subject(names.RUNS_BUCKET, "run.r1"),
        ONLY_ORCH,
        headers={"KV-Operation": "PURGE", "Nats-Rollup": "sub"},
    ),
    "kv put, workflows": Verb(names.kv_subject(names.WORKFLOWS_BUCKET, "w"), frozenset({GATEWAY})),
}
REFUSED = [(verb, user) for verb, v in VERBS.items() for user in USERS if user not in v.may]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with every user, Heddle's streams, a message in each of two, and the
    orchestrator's durable on HEDDLE_EVENTS: one for the module (its tests change nothing)."""
    with permission_server(tmp_path_factory.mktemp("permissions"), [RUNNER], _prepare) as s:
        yield s


async def _prepare(url: str) -> None:
    async with await nats.connect(url, user=SUPERUSER, password=SUPERUSER_PASSWORD) as nc:
        res = await ensure_resources(nc, Settings(nats_url=url))
        js = res.js
        await js.publish(names.evt("r1", "s", "finished", RUNNER), b'{"runId":"r1"}')
        await js.publish(
            names.log("r1", "s", 1, "default", "r"), b'{"runId":"r1","stepId":"s","attempt":1}'
        )
        await res.kv[names.RUNS_BUCKET].put(names.run_key("r1"), b'{"status":"running"}')
        durable = ConsumerConfig(durable_name=DURABLE, filter_subject=names.evt_of_partition(0))
        await js.add_consumer(EVENTS, durable)


@pytest.mark.parametrize(("verb", "user"), REFUSED)
async def test_the_server_refuses_each_user_what_it_may_not_change(
    server: Server, verb: str, user: str
) -> None:
    v = VERBS[verb]
    client = await server.login(user)
    try:
        body = json.dumps(v.body).encode()
        await client.nc.publish(v.subject, body, reply="_INBOX_x.reply", headers=v.headers)
        # nats-py gives the server's error in lower case
        await client.refused(f'permissions violation for publish to "{v.subject.lower()}"')
    finally:
        await client.nc.close()


async def test_the_inspector_cannot_repeat_the_attack(server: Server) -> None:
    """Rewrite the orchestrator's durable, make a durable, push log lines to a runner's
    cancel subject: each refused, and nothing changed."""
    admin = await nats.connect(server.url, user=SUPERUSER, password=SUPERUSER_PASSWORD)
    inspector = await server.login(INSPECTOR)
    try:
        js = admin.jetstream()
        before = {s: await _consumers(js, s) for s in (EVENTS, LOGS)}
        delivered: asyncio.Queue = asyncio.Queue()
        await admin.subscribe(names.runner_cancel(RUNNER), cb=delivered.put)
        await admin.flush()
        for attack in ("unnamed", "named durable", "push"):
            v = VERBS[f"consumer create, {attack}"]
            with pytest.raises(nats.errors.TimeoutError):  # dropped: no answer
                await inspector.nc.request(v.subject, json.dumps(v.body).encode(), timeout=0.5)
        assert sum("permissions violation" in e for e in inspector.errors) == 3
        await asyncio.sleep(0.2)  # what a push consumer would have delivered by now
        assert delivered.empty()
        info = await js.consumer_info(EVENTS, DURABLE)
        assert info.config.filter_subject == names.evt_of_partition(0)
        assert {s: await _consumers(js, s) for s in (EVENTS, LOGS)} == before
    finally:
        await inspector.nc.close()
        await admin.close()


async def _consumers(js: object, stream: str) -> set[str]:
    return {c.name for c in await js.consumers_info(stream)}  # type: ignore[attr-defined]


async def test_the_inspector_still_reads(server: Server) -> None:
    """What `nats stream ls/info/get/subjects`, `nats consumer ls/info` and `nats kv ls/get`
    ask, and live subjects (`nats sub`), in place of a watch."""
    client = await server.login(INSPECTOR)
    nc = client.nc
    admin = await nats.connect(server.url, user=SUPERUSER, password=SUPERUSER_PASSWORD)
    try:
        js = nc.jetstream(timeout=10)  # a busy machine is not a refusal
        assert (await js.account_info()).streams >= len(perms.ALL_STREAMS)
        assert {EVENTS, LOGS, STEPS} <= {i.config.name for i in await js.streams_info()}
        assert (
            await js.find_stream_name_by_subject(names.log("r1", "s", 1, "default", "r"))
        ) == LOGS
        stored = names.stored_evt("r1", "s", "finished", RUNNER)  # `nats stream subjects`
        info = await js.stream_info(EVENTS, subjects_filter=stored)
        assert list((info.state.subjects or {}).values()) == [1]
        assert [c.name for c in await js.consumers_info(EVENTS)] == [DURABLE]
        assert (await js.consumer_info(EVENTS, DURABLE)).name == DURABLE
        names_reply = await nc.request(f"{API}.CONSUMER.NAMES.{EVENTS}", b"{}", timeout=10)
        assert json.loads(names_reply.data)["consumers"] == [DURABLE]
        assert (await js.get_msg(LOGS, seq=1)).data.startswith(b'{"runId":"r1"')
        run_r1 = names.kv_subject(names.RUNS_BUCKET, names.run_key("r1"))
        runs_stream = names.kv_stream(names.RUNS_BUCKET)  # a bucket is read directly
        assert (await js.get_msg(runs_stream, seq=1, direct=True)).subject == run_r1
        assert (await js.get_msg(runs_stream, subject=run_r1, direct=True)).seq == 1
        runs = await js.key_value(names.RUNS_BUCKET)
        assert (await runs.get(names.run_key("r1"))).value == b'{"status":"running"}'
        live: asyncio.Queue = asyncio.Queue()
        await nc.subscribe("heddle.>", cb=live.put)
        await nc.subscribe("$KV.>", cb=live.put)
        await nc.flush()
        await admin.publish(names.run_stored("r1"), b"1")
        await admin.publish(names.kv_subject(names.RUNS_BUCKET, names.run_key("r2")), b"2")
        got = {(await asyncio.wait_for(live.get(), 5)).subject for _ in range(2)}
        assert got == {names.run_stored("r1"), names.kv_subject(names.RUNS_BUCKET, "run.r2")}
    finally:
        await admin.close()
        await nc.close()
    assert client.errors == []


async def test_no_reply_can_be_aimed_at_a_stream(server: Server) -> None:
    """A JetStream answer goes to the reply subject its request names, whatever the requester may
    publish: the inspector's reads and a runner's lookups and writes, their answers aimed at a run
    record and at an event, store nothing (shared/broker/nats_accounts.py)."""
    run_r1 = names.kv_subject(names.RUNS_BUCKET, names.run_key("r1"))
    event = names.evt("r1", "s", "finished", "runner-0")
    runs_stream = names.kv_stream(names.RUNS_BUCKET)
    aimed = {
        INSPECTOR: [
            (f"{API}.DIRECT.GET.{runs_stream}", {"last_by_subj": run_r1}),
            (f"{API}.STREAM.MSG.GET.{EVENTS}", {"seq": 1}),
            (f"{API}.STREAM.INFO.{EVENTS}", {}),
            (f"{API}.INFO", {}),
        ],
        perms.runner_user(RUNNER): [
            (f"{API}.STREAM.INFO.{EVENTS}", {}),
            (names.kv_subject(names.HEARTBEATS_BUCKET, f"r1.s.{RUNNER}"), {"beat": 1}),
        ],
    }
    admin = await nats.connect(server.url, user=SUPERUSER, password=SUPERUSER_PASSWORD)
    try:
        js = admin.jetstream()
        before = [await _last(js, runs_stream), await _last(js, EVENTS)]
        for user, calls in aimed.items():
            client = await server.login(user)
            try:
                for subject, body in calls:
                    data = json.dumps(body).encode()
                    for reply in (run_r1, event):
                        await client.nc.publish(subject, data, reply=reply)
                    # Answered in turn: the aimed answers went out before this one came.
                    await client.nc.request(subject, data, timeout=10)
            finally:
                await client.nc.close()
        assert [await _last(js, runs_stream), await _last(js, EVENTS)] == before
    finally:
        await admin.close()


async def _last(js: object, stream: str) -> int:
    """The stream's last sequence: a bucket keeps one revision a key, so a count would not
    show one more."""
    return (await js.stream_info(stream)).state.last_seq  # type: ignore[attr-defined]


def test_the_table_above_is_the_permission_table() -> None:
    """Who may do what, as the permission table says it (the server test only asks it of
    the users without the right)."""
    for verb, v in VERBS.items():
        allowed = {u for u in USERS if _allows(perms.permissions_for(u), v.subject)}
        assert allowed == v.may, verb


def _allows(p: perms.Permissions, subject: str) -> bool:
    return any(_match(a, subject) for a in p.publish) and not any(
        _match(d, subject) for d in p.publish_deny
    )


def _match(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` one or more at the end."""
    pat, sub = pattern.split("."), subject.split(".")
    for i, token in enumerate(pat):
        if token == ">":
            return len(sub) > i
        if i >= len(sub) or token not in ("*", sub[i]):
            return False
    return len(pat) == len(sub)
