"""`heddle nats-users`: the files Docker Compose's init service writes, and a real nats-server
that loads them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from heddle.services.cli.main import main
from heddle.services.local.embedded_nats import EmbeddedNats, free_port
from heddle.shared.broker import nats_accounts
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.broker.nats_io import connect
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.core.tokens import PREFIX, token_text_problem
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

from tests.support.nats_clients import login

USERS = ["backup", "dispatcher", "gateway", "inspector", "orchestrator"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def run(out: Path, *args: str) -> int:
    return main(["nats-users", "--dir", str(out), *args])


def test_writes_every_user_their_own_file_and_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "secrets"
    assert run(out, "--runners", "2") == 0
    runners = [perms.runner_user("runner-0"), perms.runner_user("runner-1")]
    passwords = json.loads((out / "nats-users.json").read_text())
    assert sorted(passwords) == sorted(USERS + runners)
    for user, password in passwords.items():
        assert (out / user / "password").read_text().strip() == password, user
        assert mode(out / user / "password") == 0o600, user
        assert mode(out / user) == 0o700, user
    config = (out / "nats-auth.conf").read_text()
    assert mode(out / "nats-auth.conf") == 0o600
    users = nats_accounts.users_in({"accounts": json.loads(config.removeprefix("accounts:"))})
    assert {name: u["password"] for name, (_, u) in users.items()} == passwords
    for name, (account, u) in users.items():
        assert u["permissions"] == perms.permissions_for(name).to_config(), name
        assert account == nats_accounts.account_of(name), name
    token = (out / "gateway" / "admin-token").read_text().strip()
    assert token.startswith(PREFIX) and token_text_problem(token) is None
    assert mode(out / "gateway" / "admin-token") == 0o600
    printed = capsys.readouterr().out
    assert not [p for p in [*passwords.values(), token] if p in printed]  # names, not secrets


def test_a_second_run_keeps_the_secrets_and_drops_removed_runners(tmp_path: Path) -> None:
    out = tmp_path / "secrets"
    assert run(out, "--runners", "3") == 0
    before = json.loads((out / "nats-users.json").read_text())
    token = (out / "gateway" / "admin-token").read_text()
    assert run(out, "--runners", "1") == 0
    after = json.loads((out / "nats-users.json").read_text())
    assert sorted(after) == sorted([*USERS, perms.runner_user("runner-0")])
    assert all(after[u] == before[u] for u in after)
    assert (out / "gateway" / "admin-token").read_text() == token
    assert not (out / perms.runner_user("runner-2") / "password").exists()
    assert perms.runner_user("runner-2") not in (out / "nats-auth.conf").read_text()


def test_owners(tmp_path: Path) -> None:
    """Hands the files to the given uids (here this process's own, which needs no root)."""
    out = tmp_path / "secrets"
    me = f"{os.getuid()}:{os.getgid()}"
    assert run(out, "--runners", "1", "--owner", me, "--runner-owner", me) == 0
    for path in out.rglob("*"):
        assert (path.stat().st_uid, path.stat().st_gid) == (os.getuid(), os.getgid()), path
    with pytest.raises(SystemExit):
        run(out, "--owner", "nobody")
    assert run(out, "--runners", "-1") == 2


async def test_nats_server_loads_the_config_and_each_user_its_password_file(
    tmp_path: Path,
) -> None:
    out = tmp_path / "secrets"
    assert run(out, "--runners", "2") == 0
    server = EmbeddedNats(tmp_path / "store", port=free_port(), config=out / "nats-auth.conf")
    server.start()
    try:
        # The gateway, as Compose starts it: its user and its password file.
        gateway = Settings(
            nats_url=server.url,
            nats_user="gateway",
            nats_password_file=str(out / "gateway" / "password"),
        )
        nc = await connect(gateway, "test-gateway")
        try:
            await ensure_resources(nc, gateway)
        finally:
            await nc.close()
        # runner-0 may write its own registry entry, not runner-1's.
        user = perms.runner_user("runner-0")
        client = await login(server.url, user, (out / user / "password").read_text().strip())
        nc = client.nc
        try:
            await nc.jetstream().publish(names.kv_subject(names.RUNNERS_BUCKET, "runner-0"), b"{}")
            await nc.publish(names.kv_subject(names.RUNNERS_BUCKET, "runner-1"), b"{}")
            await nc.flush()
            await client.refused()
        finally:
            await nc.close()
    finally:
        server.stop()


def test_namespace_inspectors_are_made_kept_and_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "secrets"
    assert run(out, "--runners", "0", "--inspector-namespace", "team-a") == 0
    passwords = json.loads((out / "nats-users.json").read_text())
    assert sorted(passwords) == sorted([*USERS, "inspector-team-a"])
    first = passwords["inspector-team-a"]
    assert (out / "inspector-team-a" / "password").read_text().strip() == first
    assert run(out, "--runners", "0", "--inspector-namespace", "team-b") == 0
    passwords = json.loads((out / "nats-users.json").read_text())
    assert sorted(passwords) == sorted([*USERS, "inspector-team-b"])  # team-a's is gone
    assert not (out / "inspector-team-a" / "password").exists()
    capsys.readouterr()
    assert run(out, "--inspector-namespace", "bad.name", "--inspector-namespace", "x y") == 2
    err = capsys.readouterr().err
    assert "'bad.name'" in err and "'x y'" in err
