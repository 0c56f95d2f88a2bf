"""Who may write and read a step's log, as the NATS server and the gateway enforce it: a
runner writes only under its own name, a namespace's inspector reads only its namespace's
logs, and the gateway shows an attempt's lines from its own runner alone, with the logs
written before writers were named (docs/security.md, "What the NATS server enforces")."""

from __future__ import annotations

import nats
import pytest
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import LogLine, encode

from tests.support import nats_clients
from tests.support.nats_clients import LoggedIn
from tests.support.stack import Stack, StackFactory, step_of


async def login(s: Stack, user: str) -> LoggedIn:
    return await nats_clients.login(s.nats_url, user, s.nats_password(user))


async def nats_only(stack: StackFactory, *namespaces: str) -> Stack:
    """A server with the stack's users, runner-0 and runner-1, and ``namespaces``'
    inspectors."""
    s = await stack(runners=0, services=(), wait=False)
    assert s.auth is not None and s.nats is not None
    s.auth.users.ensure_runners(["runner-0", "runner-1"])
    s.auth.users.keep_namespace_inspectors(list(namespaces))
    s.auth.users.save()
    s.nats.reload()
    async with await s.connect() as nc:
        await ensure_resources(nc, Settings())
    return s


def line(text: str) -> bytes:
    return encode(LogLine(stream="stdout", seq=1, text=text))


async def test_a_runner_writes_logs_under_its_own_name_alone(stack: StackFactory) -> None:
    s = await nats_only(stack)
    client = await login(s, perms.runner_user("runner-0"))
    js = client.nc.jetstream()
    others = names.log("r1", "s", 1, "default", "runner-1")
    try:
        # Its own: stored.
        ack = await js.publish(names.log("r1", "s", 1, "default", "runner-0"), line("mine"))
        assert ack.stream == names.LOGS_STREAM
        # Another runner's, acknowledged or not: dropped by the server.
        with pytest.raises(nats.errors.TimeoutError):
            await js.publish(others, line("forged"), timeout=1)
        await client.refused()
        client.errors.clear()
        await client.nc.publish(others, line("forged too"))
        await client.nc.flush()
        await client.refused()
        # The orchestrator's notes, or the form from before writers were named: the same.
        client.errors.clear()
        notes = names.log("r1", "s", 1, "default", names.NOTES_WRITER)
        await client.nc.publish(notes, line("a note"))
        await client.nc.publish(names.legacy_log("r1", "s", 1), line("old"))
        await client.nc.flush()
        await client.refused()
    finally:
        await client.nc.close()
    async with await s.connect() as nc:
        info = await nc.jetstream().stream_info(names.LOGS_STREAM, subjects_filter="heddle.log.>")
    assert set(info.state.subjects or {}) == {names.log("r1", "s", 1, "default", "runner-0")}


async def test_a_namespace_inspector_reads_its_namespace_logs_alone(stack: StackFactory) -> None:
    s = await nats_only(stack, "team-a")
    client = await login(s, perms.namespace_inspector_user("team-a"))
    nc = client.nc
    ours = names.log("team-a=r1", "s", 1, "team-a", "runner-0")
    theirs = names.log("team-b=r1", "s", 1, "team-b", "runner-0")
    try:
        sub = await nc.subscribe(names.namespace_logs("team-a"))
        await nc.flush()
        async with await s.connect() as admin:
            await admin.jetstream().publish(theirs, line("team-b's"))
            await admin.jetstream().publish(ours, line("team-a's"))
        msg = await sub.next_msg(timeout=5)
        assert (msg.subject, msg.data) == (ours, line("team-a's"))  # team-b's never came
        # Another namespace's logs, the events, a bucket: refused.
        for subject in (
            names.namespace_logs("team-b"),
            names.LOG_ALL,
            names.EVT_ALL,
            names.kv_subject(names.RUNS_BUCKET, ">"),
        ):
            client.errors.clear()
            await nc.subscribe(subject)
            await nc.flush()
            await client.refused("permissions violation for subscription")
        # No stored message read: by sequence, last by subject, or through a consumer.
        for api in (
            f"{perms.API}.STREAM.MSG.GET.{names.LOGS_STREAM}",
            f"{perms.API}.DIRECT.GET.{names.LOGS_STREAM}.{ours}",
            f"{perms.API}.CONSUMER.CREATE.{names.LOGS_STREAM}.mine.{ours}",
            f"{perms.API}.CONSUMER.CREATE.{names.LOGS_STREAM}.mine.{theirs}",
            f"{perms.API}.STREAM.INFO.{names.LOGS_STREAM}",
        ):
            client.errors.clear()
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request(api, b'{"seq": 1}', timeout=1)
            await client.refused()
    finally:
        await nc.close()


async def test_the_gateway_shows_the_attempts_own_runner_and_old_logs(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2)
    run_id = await s.submit({"steps": [{"id": "a", "command": "echo real"}]})
    run = await s.wait_run(run_id)
    holder = step_of(run, "a")["runner"]
    other = ({"runner-0", "runner-1"} - {holder}).pop()
    # The other runner writes under its own name for an attempt it never held: allowed by
    # the server, shown by no one.
    client = await login(s, perms.runner_user(other))
    try:
        forged = names.log(run_id, "a", 1, "default", other)
        await client.nc.jetstream().publish(forged, line("forged"))
    finally:
        await client.nc.close()
    # A line stored before writers were named (a data dir from then): shown.
    async with await s.connect() as nc:
        await nc.jetstream().publish(names.legacy_log(run_id, "a", 1), line("from before"))
    session = await s.http()
    async with session.get(f"{s.base}/api/runs/{run_id}/steps/a/logs") as resp:
        dump = await resp.json()
    texts = [x["text"] for x in dump["lines"]]
    assert "real" in texts and texts[-1] == "from before" and "forged" not in texts
    async with session.get(f"{s.base}/api/runs/{run_id}/steps/a") as resp:
        doc = await resp.json()
    (group,) = doc["logs"]
    assert [x["text"] for x in group["lines"]] == texts
    assert group["lineCount"] == len(texts)
