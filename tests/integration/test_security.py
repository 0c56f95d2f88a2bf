"""The attacks Heddle must stop, each against a real stack: anonymous and out-of-role NATS
clients, steps looking for keys, one runner speaking for another's attempt, and a submit
that skips the gateway (docs/security.md, "Security"). The gateway's tokens, Host
check and form refusal are in test_auth.py."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import sys
import time
from pathlib import Path

import aiohttp
import nats
import pytest
from heddle.services.local.embedded_nats import free_port
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import Heartbeat, StepFinished, StepSpec, SubmitRun, encode
from heddle.shared.wire.timefmt import now_rfc3339

from tests.support import nats_clients
from tests.support.nats_clients import LoggedIn
from tests.support.stack import Stack, StackFactory, step_of

# Run as a step's command: try NATS with no credentials.
CONNECTS = """
import asyncio, sys, nats
async def main():
    try:
        nc = await nats.connect(sys.argv[1], allow_reconnect=False, connect_timeout=3)
    except Exception as exc:
        print("refused:", exc)
        return
    print("connected")
    await nc.close()
asyncio.run(main())
"""


async def login(s: Stack, user: str) -> LoggedIn:
    """A connection as one of the stack's users, its asynchronous errors collected."""
    return await nats_clients.login(s.nats_url, user, s.nats_password(user))


async def nats_only(stack: StackFactory) -> Stack:
    s = await stack(runners=0, services=(), wait=False)
    async with await s.connect() as nc:
        await ensure_resources(nc, Settings())
    return s


async def test_an_anonymous_connection_is_refused(stack: StackFactory) -> None:
    """Over a raw socket, as anything on the network would try it."""
    s = await nats_only(stack)
    assert s.nats is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", s.nats.port)
    try:
        assert (await reader.readline()).startswith(b"INFO ")
        writer.write(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
        await writer.drain()
        answer = await asyncio.wait_for(reader.readline(), 5)
    finally:
        writer.close()
        await writer.wait_closed()
    assert answer.strip() == b"-ERR 'Authorization Violation'"


# (user, subject written): each outside the user's permissions.
REFUSED_WRITES = [
    ("runner-runner-0", names.kv_subject(names.RUNS_BUCKET, names.run_key("r1"))),
    ("runner-runner-0", names.evt("r1", "s", "finished", "runner-1")),
    ("runner-runner-0", names.kv_subject(names.HEARTBEATS_BUCKET, "r1.s.runner-1")),
    ("runner-runner-0", names.kv_subject(names.RUNNERS_BUCKET, "runner-1")),
    ("runner-runner-0", names.cmd_submit("r1")),
    ("gateway", names.kv_subject(names.HEARTBEATS_BUCKET, "r1.s.runner-0")),
    ("gateway", names.kv_subject(names.RUNS_BUCKET, names.run_key("r1"))),
    ("dispatcher", names.kv_subject(names.RUNS_BUCKET, names.run_key("r1"))),
    ("inspector", names.cmd_submit("r1")),
    ("inspector", names.kv_subject(names.RUNS_BUCKET, names.run_key("r1"))),
    ("inspector", f"{perms.API}.STREAM.PURGE.{names.EVENTS_STREAM}"),
]


@pytest.mark.parametrize(("user", "subject"), REFUSED_WRITES)
async def test_each_role_is_refused_outside_its_permissions(
    stack: StackFactory, user: str, subject: str
) -> None:
    s = await nats_only(stack)
    if user.startswith(perms.RUNNER_PREFIX):
        s.auth.add_runner(user[len(perms.RUNNER_PREFIX) :])  # type: ignore[union-attr]
        s.nats.reload()  # type: ignore[union-attr]
    client = await login(s, user)
    try:
        with pytest.raises(nats.errors.TimeoutError):  # dropped: no acknowledgement comes
            await client.nc.jetstream().publish(subject, b"{}", timeout=1)
        await client.refused()
    finally:
        await client.nc.close()
    assert f'Publish Violation - Subject "{subject}"' in (s.tmp / "nats.log").read_text()


async def test_a_runner_may_not_listen_for_another_runners_assignments(
    stack: StackFactory,
) -> None:
    s = await nats_only(stack)
    s.auth.add_runner("runner-0")  # type: ignore[union-attr]
    s.nats.reload()  # type: ignore[union-attr]
    client = await login(s, perms.runner_user("runner-0"))
    try:
        await client.nc.subscribe(names.runner_assign("runner-1"))
        await client.nc.flush()
        await client.refused("permissions violation for subscription")
    finally:
        await client.nc.close()


async def test_the_inspector_reads_everything_and_writes_nothing(stack: StackFactory) -> None:
    """The nats CLI context `heddle up` writes: list streams, read a bucket, subscribe."""
    s = await stack(runners=1)
    run_id = await s.submit({"steps": [{"id": "a", "command": "echo hi"}]})
    await s.wait_run(run_id)
    assert s.auth is not None
    context = json.loads(s.auth.users.save_context(s.nats_url).read_text())
    assert set(context) >= {"url", "user", "password"} and context["user"] == "inspector"
    client = await login(s, context["user"])
    nc, errors = client.nc, client.errors
    try:
        js = nc.jetstream()
        streams = {info.config.name for info in await js.streams_info()}
        assert {names.CMD_STREAM, names.EVENTS_STREAM, f"KV_{names.RUNS_BUCKET}"} <= streams
        runs = await js.key_value(names.RUNS_BUCKET)
        assert b'"status":"succeeded"' in (await runs.get(names.run_key(run_id))).value
        seen: asyncio.Queue = asyncio.Queue()
        await nc.subscribe("heddle.notify.>", cb=seen.put)
        await nc.flush()
        with pytest.raises(nats.errors.TimeoutError):
            await runs.put(names.run_key(run_id), b"{}")
        with pytest.raises(nats.errors.TimeoutError):
            await js.publish(names.cmd_cancel(run_id), b"{}", timeout=1)
    finally:
        await nc.close()
    assert sum("permissions violation" in e for e in errors) >= 2


async def test_a_step_holds_no_credential_and_nats_refuses_it(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=1)
    script = tmp_path / "connects.py"
    script.write_text(CONNECTS)
    steps = [
        {"id": "env", "command": "env"},
        {"id": "nats", "command": f"{sys.executable} {script} {s.nats_url}"},
    ]
    run = await s.wait_run(await s.submit({"steps": steps}))
    env, connect = (step_of(run, x)["stdoutTail"] for x in ("env", "nats"))
    assert s.auth is not None
    secrets = [s.admin_token, *s.auth.users.passwords.values()]
    assert not [x for x in secrets if x in env]
    names_seen = {line.split("=", 1)[0] for line in env.splitlines() if "=" in line}
    assert {n for n in names_seen if n.startswith(("HEDDLE_", "NATS_"))} == {
        "HEDDLE_RUN_ID",
        "HEDDLE_STEP_ID",
        "HEDDLE_ATTEMPT",
        "HEDDLE_OUTPUTS",  # the path of the step's own outputs file
        "HEDDLE_WORKDIR",  # the path of the step's own working directory
    }
    assert connect.startswith("refused:") and "Authorization Violation" in connect


async def test_steps_run_as_the_step_user_where_the_runner_can_switch(
    stack: StackFactory,
) -> None:
    """As root, steps run as HEDDLE_STEP_USER (spawned by the runner's step launcher) and
    can read neither the stack's key files nor the runner's environment; a runner that is
    not root runs them as itself, and its environment is still out of their reach, as it
    is non-dumpable (docs/security.md)."""
    s = await stack(runners=1, HEDDLE_STEP_USER="nobody")
    assert s.auth is not None
    keys = s.auth.users.data_dir / "nats-users.json"
    runner = s.procs["runner-0"].pid
    command = (
        f"id -u; (cat {keys} >/dev/null 2>&1 && echo readable) || echo unreadable; "
        f"(cat /proc/{runner}/environ >/dev/null 2>&1 && echo readable) || echo unreadable; "
        "(cat /proc/$PPID/environ >/dev/null 2>&1 && echo readable) || echo unreadable; "
        f"kill -0 {runner} 2>/dev/null && echo signalled || echo protected"
    )
    run = await s.wait_run(await s.submit({"steps": [{"id": "who", "command": command}]}))
    out = step_of(run, "who")["stdoutTail"].splitlines()
    if os.geteuid() == 0:
        nobody = str(pwd.getpwnam("nobody").pw_uid)
        assert out == [nobody, "unreadable", "unreadable", "unreadable", "protected"]
    else:
        assert (out[0], out[2], out[3]) == (str(os.geteuid()), "unreadable", "unreadable")


def forged_outcome(run_id: str, step: str, runner: str, ticket: str = "") -> StepFinished:
    return StepFinished(
        run_id=run_id,
        step_id=step,
        attempt=1,
        runner=runner,
        ticket=ticket,
        outcome="failed",
        finished_at=now_rfc3339(),
        exit_code=99,
        stdout_tail="made up",
    )


async def test_one_runner_cannot_speak_for_another_runners_attempt(
    stack: StackFactory, tmp_path: Path
) -> None:
    """runner-1's credentials, as a step that escaped onto it would hold them, against
    runner-0's running step: an outcome under runner-0's name is dropped by the server;
    under its own name, with a guessed ticket or naming runner-0 in its body, the
    orchestrator refuses it; a heartbeat for a ghost runner is dropped, and one of its
    own is ignored. The real step then succeeds and its dependent runs after it."""
    s = await stack(runners=2)
    gate = tmp_path / "gate"
    doc = {
        "steps": [
            {"id": "victim", "command": f"while [ ! -e {gate} ]; do sleep 0.05; done"},
            {"id": "after", "command": "echo after", "dependsOn": ["victim"]},
        ]
    }
    run_id = await s.submit(doc)
    victim = await s.wait_step(run_id, "victim", {"running"})
    holder, other = victim["runner"], ({"runner-0", "runner-1"} - {victim["runner"]}).pop()
    nc = (await login(s, perms.runner_user(other))).nc
    js = nc.jetstream()
    try:
        attempts = [
            (
                names.evt(run_id, "victim", "finished", holder),
                forged_outcome(run_id, "victim", holder),
            ),
            (
                names.evt(run_id, "victim", "finished", other),
                forged_outcome(run_id, "victim", other, ticket="0123456789abcdef"),
            ),
            (
                names.evt(run_id, "victim", "finished", other),
                forged_outcome(run_id, "victim", holder),
            ),
        ]
        for subject, forged in attempts:
            await nc.publish(subject, encode(forged))
        beat = Heartbeat(runner="ghost", run_id=run_id, step_id="victim", attempt=1, seq=99)
        ghost_key = names.heartbeat_key(run_id, "victim", "ghost")
        await nc.publish(names.kv_subject(names.HEARTBEATS_BUCKET, ghost_key), encode(beat))
        own = Heartbeat(runner=other, run_id=run_id, step_id="victim", attempt=1, seq=1)
        own_key = names.heartbeat_key(run_id, "victim", other)
        await js.publish(names.kv_subject(names.HEARTBEATS_BUCKET, own_key), encode(own))
        await nc.flush()
    finally:
        await nc.close()
    deadline = time.monotonic() + 10
    while "heartbeat ignored" not in s.logs("orchestrator") or "event refused" not in s.logs(
        "orchestrator"
    ):
        assert time.monotonic() < deadline, s.logs("orchestrator")[-3000:]
        await asyncio.sleep(0.05)
    await asyncio.sleep(1)  # the silence limit is 0.6 s: a believed ghost would have failed it
    run = await s.run(run_id)
    assert (step_of(run, "victim")["status"], step_of(run, "after")["status"]) == (
        "running",
        "pending",
    )
    assert "its ticket is not the attempt's" in s.logs("orchestrator")
    nats_log = (s.tmp / "nats.log").read_text()
    assert "Publish Violation" in nats_log and ghost_key in nats_log
    gate.touch()
    run = await s.wait_run(run_id)
    victim, after = step_of(run, "victim"), step_of(run, "after")
    assert (run["status"], victim["exitCode"], victim["runner"]) == ("succeeded", 0, holder)
    assert after["stdoutTail"] == "after"


async def test_a_submit_that_skips_the_gateway_is_validated(
    stack: StackFactory, tmp_path: Path
) -> None:
    """Published straight to heddle.cmd.submit.<run> (with the gateway's own credentials): bad
    ids create no run, run nothing, and are logged with every problem."""
    s = await stack(runners=1)
    marker = tmp_path / "ran"
    bad = SubmitRun(
        run_id="x.y",
        submitted_at=now_rfc3339(),
        steps=[
            StepSpec(id="s.*>", command=f"touch {marker}"),
            StepSpec(id="t", command="true", depends_on=["nope"]),
        ],
    )
    nc = (await login(s, perms.GATEWAY)).nc
    try:
        # On the subject of a good id: the body's own id is checked too.
        await nc.jetstream().publish(names.cmd_submit("x-y"), encode(bad))
    finally:
        await nc.close()
    deadline = time.monotonic() + 10
    while "submit refused" not in s.logs("orchestrator"):
        assert time.monotonic() < deadline, s.logs("orchestrator")[-2000:]
        await asyncio.sleep(0.05)
    refused = next(
        json.loads(line) for line in s.logs("orchestrator").splitlines() if "submit refused" in line
    )
    for problem in ("runId", "steps[0].id", "steps[1].dependsOn[0]"):
        assert problem in refused["msg"], refused
    status, body = await s.request("GET", "/api/runs")
    assert status == 200 and body["runs"] == []
    await asyncio.sleep(0.5)
    assert not marker.exists()
    # A good one on the same path still runs.
    good = SubmitRun(
        run_id="direct", submitted_at=now_rfc3339(), steps=[StepSpec(id="a", command="true")]
    )
    nc = (await login(s, perms.GATEWAY)).nc
    try:
        await nc.jetstream().publish(names.cmd_submit("direct"), encode(good))
    finally:
        await nc.close()
    assert (await s.wait_run("direct"))["status"] == "succeeded"


async def test_a_rebinding_host_is_refused_by_a_running_gateway(stack: StackFactory) -> None:
    s = await stack(runners=0)
    status, body = await s.request("GET", "/api/runs", headers={"Host": "evil.example"})
    assert status == 421 and "evil.example" in json.dumps(body)
    status, _ = await s.request("GET", "/api/runs", headers={"Host": f"localhost:{s.gateway_port}"})
    assert status == 200


async def test_a_token_revoked_through_one_gateway_process_is_refused_by_another(
    stack: StackFactory,
) -> None:
    s = await stack(runners=0)
    second = free_port()
    s.start("gateway-2", service="gateway", HEDDLE_GATEWAY_PORT=str(second))
    status, made = await s.request("POST", "/api/tokens", json={"name": "ci", "role": "viewer"})
    assert status == 201
    token = {"Authorization": f"Bearer {made['token']}"}
    other = f"http://127.0.0.1:{second}/api/runs"
    session = await s.http()
    deadline = time.monotonic() + 20
    while True:  # the second gateway is up and has seen the new token
        try:
            async with session.get(other, headers=token) as resp:
                if resp.status == 200:
                    break
        except aiohttp.ClientError:
            pass
        assert time.monotonic() < deadline, s.logs("gateway-2")[-2000:]
        await asyncio.sleep(0.05)
    status, _ = await s.request("POST", "/api/tokens/ci/revoke")
    assert status == 200
    deadline = time.monotonic() + 5
    while True:
        async with session.get(other, headers=token) as resp:
            if resp.status == 401:
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                break
        assert time.monotonic() < deadline, "the revocation did not reach the other gateway"
        await asyncio.sleep(0.05)


async def test_a_forged_outcome_for_a_queued_step_is_refused(
    stack: StackFactory, tmp_path: Path
) -> None:
    """A queued step has no known runner yet, so only its ticket tells its runner from
    another: runner-1, which was never given it, reports it finished under its own name."""
    s = await stack(runners=1)
    assert s.auth is not None and s.nats is not None
    if s.auth.add_runner("runner-1"):
        s.nats.reload()
    gate = tmp_path / "gate"
    doc = {
        "steps": [
            {"id": "busy", "command": f"while [ ! -e {gate} ]; do sleep 0.05; done"},
            {"id": "waiting", "command": "echo real"},
            {"id": "after", "command": "echo after", "dependsOn": ["waiting"]},
        ]
    }
    run_id = await s.submit(doc)
    await s.wait_step(run_id, "busy", {"running"})
    assert step_of(await s.run(run_id), "waiting")["status"] == "queued"  # one runner, busy
    nc = (await login(s, perms.runner_user("runner-1"))).nc
    try:
        forged = forged_outcome(run_id, "waiting", "runner-1", ticket="0123456789abcdef")
        await nc.jetstream().publish(
            names.evt(run_id, "waiting", "finished", "runner-1"), encode(forged)
        )
    finally:
        await nc.close()
    deadline = time.monotonic() + 10
    while "its ticket is not the attempt's" not in s.logs("orchestrator"):
        assert time.monotonic() < deadline, s.logs("orchestrator")[-2000:]
        await asyncio.sleep(0.05)
    run = await s.run(run_id)
    assert [step_of(run, x)["status"] for x in ("waiting", "after")] == ["queued", "pending"]
    gate.touch()
    run = await s.wait_run(run_id)
    waiting = step_of(run, "waiting")
    assert (run["status"], waiting["stdoutTail"], waiting["runner"]) == (
        "succeeded",
        "real",
        "runner-0",
    )


async def test_a_service_with_a_wrong_password_stops_and_says_so(stack: StackFactory) -> None:
    s = await nats_only(stack)
    proc = s.start("orchestrator", HEDDLE_NATS_PASSWORD="wrong")
    assert proc.popen is not None
    assert proc.popen.wait(30) == 2
    assert "refused user 'orchestrator': check HEDDLE_NATS_USER" in s.logs("orchestrator")
