"""`heddle backup` and `heddle restore` (docs/backup.md): a running `heddle up` backed up
through its NATS server, restored into a new data dir, and `heddle up` on that goes on where
the backup left it; and what either refuses."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.core import backups
from heddle.shared.wire import names

from tests.support.cli import heddle
from tests.support.nats_clients import login
from tests.support.stack import StackFactory, step_of
from tests.support.up import Up, run_ended, start_up, wait_http

# The step under way at the backup has no runner in the restored Heddle: its silence is
# judged after interval x grace, and its next attempt runs.
QUICK = {"HEDDLE_HEARTBEAT_INTERVAL": "0.5", "HEDDLE_HEARTBEAT_GRACE": "4"}
NIGHTLY = {
    "name": "nightly",
    "schedule": "0 3 * * *",
    "steps": [{"id": "a", "command": "echo nightly"}],
}
DONE = {"steps": [{"id": "hello", "command": "echo a-line-backed-up"}]}
UNDER_WAY = {
    "steps": [
        {"id": "slow", "command": "sleep 4", "retries": 2},
        {"id": "after", "command": "echo after", "dependsOn": ["slow"]},
    ]
}


def stop(up: Up) -> None:
    up.proc.send_signal(signal.SIGTERM)
    out, _ = up.proc.communicate(timeout=60)
    assert up.proc.returncode == 0, out.decode()[-3000:]


async def call(http: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[int, Any]:
    async with http.request(method, url, **kw) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if text.startswith(("{", "[")) else text


async def fill(http: aiohttp.ClientSession, base: str) -> dict[str, str]:
    """A workflow with a schedule, a run done with its log, a token, and a run whose step
    runs now; what the restored Heddle must show."""
    status, _ = await call(http, "POST", f"{base}/api/workflows", json=NIGHTLY)
    assert status in (200, 201)
    status, body = await call(http, "POST", f"{base}/api/runs", json=DONE)
    done = body["runId"]
    assert (await run_ended(http, f"{base}/api/runs/{done}"))["status"] == "succeeded"
    status, body = await call(
        http, "POST", f"{base}/api/tokens", json={"name": "ci", "role": "viewer"}
    )
    assert status == 201, body
    viewer = body["token"]
    status, body = await call(http, "POST", f"{base}/api/runs", json=UNDER_WAY)
    under_way = body["runId"]

    async def running() -> bool:
        _, run = await call(http, "GET", f"{base}/api/runs/{under_way}")
        return bool(step_of(run, "slow")["status"] == "running")

    for _ in range(200):
        if await running():
            break
        await asyncio.sleep(0.05)
    assert await running()
    return {"done": done, "under_way": under_way, "viewer": viewer}


async def test_a_restored_heddle_goes_on_from_its_backup(tmp_path: Path) -> None:
    data, backup, new = tmp_path / "data", tmp_path / "backup", tmp_path / "new"
    old = start_up(tmp_path, data, runners=2, settings=QUICK)
    try:
        await wait_http(f"http://127.0.0.1:{old.port}/api/runners", data / "admin-token", 2)
        token = (data / "admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            made = await fill(http, f"http://127.0.0.1:{old.port}")
        rc, out, err = await heddle("backup", str(backup), "--data-dir", str(data))
        assert rc == 0, err
    finally:
        stop(old)
    assert out.startswith(f"backed up {len(backups.SNAPSHOT_ORDER)} streams"), out
    manifest = backups.decode_manifest((backup / backups.MANIFEST_FILE).read_bytes())
    assert [e.name for e in manifest.streams] == list(backups.SNAPSHOT_ORDER)
    runs = next(e for e in manifest.streams if e.name == names.kv_stream(names.RUNS_BUCKET))
    assert runs.messages > 0 and runs.last_seq >= runs.messages
    for path in [*manifest.files, backups.MANIFEST_FILE]:
        assert (backup / path).stat().st_mode & 0o777 == 0o600, path  # it holds secrets

    rc, out, err = await heddle("restore", str(backup), "--data-dir", str(new))
    assert rc == 0, err
    assert (new / "admin-token").read_text().strip() == token
    assert perms.RESTORE not in json.loads((new / "nats-users.json").read_text())
    restored = start_up(tmp_path, new, runners=2, settings=QUICK)
    try:
        base = f"http://127.0.0.1:{restored.port}"
        await wait_http(f"{base}/api/runners", new / "admin-token", 2)
        async with aiohttp.ClientSession(headers=headers) as http:  # the old admin token
            ended = await run_ended(http, f"{base}/api/runs/{made['under_way']}")
            assert ended["status"] == "succeeded", ended
            assert step_of(ended, "after")["status"] == "succeeded"
            _, run = await call(http, "GET", f"{base}/api/runs/{made['done']}")
            assert run["status"] == "succeeded"
            _, log = await call(http, "GET", f"{base}/api/runs/{made['done']}/steps/hello/logs")
            assert "a-line-backed-up" in json.dumps(log)
            status, workflow = await call(http, "GET", f"{base}/api/workflows/nightly")
            assert status == 200 and "0 3 * * *" in json.dumps(workflow), workflow
            _, tokens = await call(http, "GET", f"{base}/api/tokens")
            assert {t["name"] for t in tokens["tokens"]} >= {"admin", "ci"}
        viewer = {"Authorization": f"Bearer {made['viewer']}"}
        async with aiohttp.ClientSession(headers=viewer) as http:
            status, _ = await call(http, "GET", f"{base}/api/runs/{made['done']}")
            assert status == 200  # the token made before the backup
    finally:
        stop(restored)


async def backed_up(stack: StackFactory, backup: Path) -> None:
    """A backup of a stack's server, taken as HEDDLE_NATS_URL and the backup user say."""
    s = await stack(runners=1)
    await s.wait_run(await s.submit(DONE))
    env = {
        "HEDDLE_NATS_URL": s.nats_url,
        "HEDDLE_NATS_USER": perms.BACKUP,
        "HEDDLE_NATS_PASSWORD": s.nats_password(perms.BACKUP),
    }
    rc, _, err = await heddle("backup", str(backup), env=env)
    assert rc == 0, err
    rc, _, err = await heddle("backup", str(backup), env=env)  # not into one that holds one
    assert rc == 1 and f"{backup} is not empty" in err, err
    # It reads; it writes nothing, makes no consumer, restores nothing.
    for subject in (
        names.kv_subject(names.RUNS_BUCKET, names.run_key("x")),
        f"$JS.API.CONSUMER.CREATE.{names.CMD_STREAM}",
        f"$JS.API.STREAM.RESTORE.{names.CMD_STREAM}",
    ):
        client = await login(s.nats_url, perms.BACKUP, s.nats_password(perms.BACKUP))
        try:
            await client.nc.publish(subject, b"{}")
            await client.refused(f'permissions violation for publish to "{subject.lower()}"')
        finally:
            await client.nc.close()


async def test_a_restore_refuses_a_target_that_is_not_empty_and_a_changed_file(
    stack: StackFactory, tmp_path: Path
) -> None:
    backup, target = tmp_path / "backup", tmp_path / "target"
    await backed_up(stack, backup)
    files = json.loads((backup / backups.MANIFEST_FILE).read_text())["files"]
    assert backups.ADMIN_TOKEN_FILE not in files  # none beside a server HEDDLE_NATS_URL names

    target.mkdir()
    (target / "mine").write_text("kept")
    rc, _, err = await heddle("restore", str(backup), "--data-dir", str(target))
    assert rc == 1 and "is not empty" in err, err
    assert [p.name for p in target.iterdir()] == ["mine"]

    changed = backup / backups.data_path(names.kv_stream(names.RUNS_BUCKET))
    content = bytearray(changed.read_bytes())
    content[len(content) // 2] ^= 0xFF
    changed.write_bytes(bytes(content))
    fresh = tmp_path / "fresh"
    rc, _, err = await heddle("restore", str(backup), "--data-dir", str(fresh))
    assert rc == 1, err
    assert f"{backups.data_path(names.kv_stream(names.RUNS_BUCKET))}: sha256" in err
    assert not fresh.exists()  # checked before anything is made


async def test_usage_and_a_data_dir_without_heddle(tmp_path: Path) -> None:
    rc, _, err = await heddle("restore", str(tmp_path))
    assert rc == 2 and "--data-dir" in err
    rc, _, err = await heddle("backup", str(tmp_path / "b"), "--data-dir", str(tmp_path))
    assert rc == 1 and "is not a data dir `heddle up` has started on" in err, err
    assert not (tmp_path / "b").exists()
