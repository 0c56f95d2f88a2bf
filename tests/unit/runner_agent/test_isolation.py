"""What a step gets from its runner (services/runner_agent/isolation.py) and the NATS
permission table (shared/broker/nats_permissions.py): pure, no server. The server's own refusals
are in tests/integration/test_security.py."""

from __future__ import annotations

import ctypes
import os
import pwd

import pytest
from heddle.services.runner_agent.isolation import (
    StepUser,
    StepUserError,
    make_undumpable,
    resolve_step_user,
    step_base_env,
)
from heddle.shared.broker import nats_accounts
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.wire import names

PR_GET_DUMPABLE = 3


def test_a_step_gets_no_heddle_or_nats_variable_and_no_url_with_a_password() -> None:
    env = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "HEDDLE_NATS_PASSWORD": "pw",
        "HEDDLE_NATS_USER": "runner-a",
        "HEDDLE_NATS_URL": "nats://127.0.0.1:4222",
        "HEDDLE_ADMIN_TOKEN_FILE": "/x/admin-token",
        "NATS_CONTEXT": "/x/ctx.json",
        "NATS_PASSWORD": "pw",
        "DATABASE_URL": "postgres://app:secret@db/app",
        "MIRROR": "https://mirror.example/simple",
        "LANG": "C.UTF-8",
    }
    assert step_base_env(env) == {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "MIRROR": "https://mirror.example/simple",
        "LANG": "C.UTF-8",
    }


def test_the_step_user_is_resolved_only_where_the_runner_can_switch() -> None:
    nobody = pwd.getpwnam("nobody")
    assert resolve_step_user("nobody", euid=0) == StepUser(
        "nobody", nobody.pw_uid, nobody.pw_gid, nobody.pw_dir
    )
    assert resolve_step_user(str(nobody.pw_uid), euid=0).name == "nobody"  # type: ignore[union-attr]
    assert resolve_step_user("nobody", euid=1000) is None  # not root: steps run as the runner
    assert resolve_step_user("none", euid=0) is None
    with pytest.raises(StepUserError, match="no such user"):
        resolve_step_user("no-such-user-here", euid=0)
    with pytest.raises(StepUserError, match="is root"):
        resolve_step_user("root", euid=0)


def _allows(allowed: tuple[str, ...], subject: str) -> bool:
    """NATS subject matching: `*` one token, `>` the rest."""
    want, have = subject.split("."), None
    for pattern in allowed:
        have = pattern.split(".")
        for i, token in enumerate(have):
            if token == ">":
                if len(want) > i:
                    return True
                break
            if i >= len(want) or (token != "*" and token != want[i]):
                break
        else:
            if len(have) == len(want):
                return True
    return False


def test_a_runner_may_write_only_under_its_own_name() -> None:
    own = perms.runner("runner-a").publish
    assert _allows(own, names.evt("r", "s", "finished", "runner-a"))
    assert _allows(own, names.kv_subject(names.HEARTBEATS_BUCKET, "r.s.runner-a"))
    assert _allows(own, names.kv_subject(names.RUNNERS_BUCKET, "runner-a"))
    for foreign in (
        names.evt("r", "s", "finished", "runner-b"),
        names.evt("r", "s", "started", "runner-b"),
        names.kv_subject(names.HEARTBEATS_BUCKET, "r.s.runner-b"),
        names.kv_subject(names.RUNNERS_BUCKET, "runner-b"),
        names.kv_subject(names.RUNS_BUCKET, "run.r"),
        names.cmd_submit("r"),
        names.step_ready("r", "s"),
        f"{perms.API}.STREAM.CREATE.{names.EVENTS_STREAM}",
        f"{perms.API}.CONSUMER.CREATE.{names.STEPS_STREAM}",
        f"{perms.API}.DIRECT.GET.KV_{names.RUNS_BUCKET}",
    ):
        assert not _allows(own, foreign), foreign
    subscribe = perms.runner("runner-a").subscribe
    assert _allows(subscribe, names.runner_assign("runner-a"))
    assert not _allows(subscribe, names.runner_assign("runner-b"))
    assert not _allows(subscribe, "_INBOX.x") and not _allows(subscribe, "_INBOX_gateway.x")


def test_only_the_gateway_and_the_orchestrator_submit_and_only_the_orchestrator_writes_runs() -> (
    None
):
    runs = names.kv_subject(names.RUNS_BUCKET, "run.r")
    users = ["gateway", "orchestrator", "dispatcher", "inspector", "runner-x"]
    submitters = {
        u for u in users if _allows(perms.permissions_for(u).publish, names.cmd_submit("r"))
    }
    writers = {u for u in users if _allows(perms.permissions_for(u).publish, runs)}
    assert (submitters, writers) == ({"gateway", "orchestrator"}, {"orchestrator"})


def test_the_inspector_reads_but_publishes_no_message_and_creates_no_consumer() -> None:
    """Only JetStream API reads, each named: no consumer create of any form (its body can
    name a service's durable, be durable or push anywhere), no pull, no wildcard verb."""
    lookups = ("INFO", "STREAM.LIST", "STREAM.NAMES")
    reads = ("STREAM.INFO.", "CONSUMER.LIST.", "CONSUMER.NAMES.", "CONSUMER.INFO.")
    gets = ("DIRECT.GET.", "STREAM.MSG.GET.")
    for p in perms.inspector().publish:
        verb = p.removeprefix(f"{perms.API}.")
        assert verb != p and (verb in lookups or verb.startswith(reads + gets)), p


def test_the_configuration_has_every_user_in_its_account_and_no_anonymous_one() -> None:
    config = nats_accounts.server_config({"gateway": "a", "runner-r1": "b", "inspector": "c"})
    assert set(config) == {"accounts"}  # no no_auth_user, no user outside an account
    users = nats_accounts.users_in(config)
    accounts = {name: account for name, (account, _) in users.items()}
    assert accounts == {"gateway": "HEDDLE", "runner-r1": "RUNNERS", "inspector": "INSPECT"}
    assert users["runner-r1"][1]["permissions"]["allow_responses"] is True
    with pytest.raises(KeyError):
        perms.permissions_for("someone")


def test_only_the_services_account_has_streams() -> None:
    """JetStream, and so every stream a reply could be aimed at, in HEDDLE alone."""
    config = nats_accounts.server_config({"gateway": "a", "runner-r1": "b", "inspector": "c"})
    with_js = [a for a, block in config["accounts"].items() if "jetstream" in block]  # type: ignore[attr-defined]
    assert with_js == ["HEDDLE"]


def test_a_store_limit_is_the_services_accounts_own() -> None:
    """HEDDLE_STORE_MAX_BYTES: the account's max_file, which the server holds every write
    to and $JS.API.INFO reports (docs/storage.md)."""
    passwords = {"gateway": "a", "runner-r1": "b"}
    blocks = nats_accounts.server_config(passwords, store_max_bytes=4096)["accounts"]
    assert blocks["HEDDLE"]["jetstream"] == {"max_file": 4096}  # type: ignore[index]
    unlimited = nats_accounts.server_config(passwords)["accounts"]
    assert unlimited["HEDDLE"]["jetstream"] == "enabled"  # type: ignore[index]


def test_the_runners_and_the_inspector_import_only_what_their_users_may_publish() -> None:
    """An import is a door into HEDDLE: runners get the subjects a runner may publish (each
    runner's user still names itself), the inspector the API reads and no write verb."""
    links = nats_accounts.links()
    imported = {
        account: {i["service"]["subject"] for i in block["imports"] if "service" in i}
        for account, block in links.items()
    }
    assert imported["RUNNERS"] == set(perms.runner("*").publish)
    assert imported["INSPECT"] == set(perms.inspector().publish)
    assert imported["HEDDLE"] == {names.RUNNER_ALL}
    streams = {i["stream"]["subject"] for i in links["INSPECT"]["imports"] if "stream" in i}
    assert streams == {"heddle.>", "$KV.>"} and links["INSPECT"]["exports"] == []
    for export in links["HEDDLE"]["exports"]:  # each to the one account that imports it
        assert len(export["accounts"]) == 1 and export["accounts"][0] in {"RUNNERS", "INSPECT"}


def test_every_user_has_inboxes_of_its_own() -> None:
    for user in ("gateway", "orchestrator", "dispatcher", "runner-r1"):
        subscribe = perms.permissions_for(user).subscribe
        assert f"_INBOX_{user}.>" in subscribe and "_INBOX.>" not in subscribe


def test_the_runner_is_made_non_dumpable() -> None:
    """In a forked child, so this test process keeps its own flag."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report PR_GET_DUMPABLE after the call
        os.close(read)
        made = make_undumpable()
        flag = ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)
        os.write(write, f"{made} {flag}".encode())
        os._exit(0)
    os.close(write)
    answer = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == "True 0"
