"""The NATS accounts Heddle's users live in, and the server configuration built from them.
Pure: the users' permissions come from shared/broker/nats_permissions.py.

Three accounts, so that no reply subject can reach a stream it should not. A JetStream API
request names the subject its answer goes to, the server publishes that answer whatever
the requester may publish, and a stream stores what is published on its subjects: with one
account, a read such as the inspector's ``DIRECT.GET`` aimed its answer at a run record's
key and stored a revision of it. Across accounts an answer goes back to the requester's own
account alone, where no stream is.

- ``HEDDLE``: the services, and every stream and bucket (the only account with JetStream).
- ``RUNNERS``: the runners. They reach ``HEDDLE`` through service imports of exactly what a
  runner may publish (its events, logs, heartbeats and registry entry, and the lookups it
  makes at start); ``HEDDLE`` reaches them through a service import of ``heddle.runner.>``
  (assignments and cancels, whose replies the server routes back).
- ``INSPECT``: the read-only inspector and each namespace's (``inspector-<namespace>``,
  confined by its own user to its namespace's logs). It imports the read calls of the
  JetStream API as services and the live subjects as streams, and exports nothing.
"""

from __future__ import annotations

from typing import Any

from heddle.shared.broker import nats_permissions as perms
from heddle.shared.wire import names

HEDDLE = "HEDDLE"
RUNNERS = "RUNNERS"
INSPECT = "INSPECT"
# What the inspector may watch live, as today's `nats sub` does (read-only: a stream import).
LIVE_SUBJECTS = ("heddle.>", "$KV.>")


def account_of(user: str) -> str:
    """The account a user is in: a runner's, the inspector's, or the services' (every other
    user, a test's or a benchmark's own included)."""
    if user.startswith(perms.RUNNER_PREFIX):
        return RUNNERS
    if user == perms.INSPECTOR or user.startswith(perms.NAMESPACE_INSPECTOR_PREFIX):
        return INSPECT
    return HEDDLE


def runner_calls() -> tuple[str, ...]:
    """What any runner may publish, every runner's name a wildcard: the subjects ``RUNNERS``
    imports from ``HEDDLE``. Each runner's own user still confines it to its own name."""
    return tuple(sorted(set(perms.runner("*").publish)))


def inspector_calls() -> tuple[str, ...]:
    """The JetStream API reads the inspector may make: the subjects ``INSPECT`` imports."""
    return tuple(sorted(set(perms.inspector().publish)))


def links() -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Each account's exports and imports: the same for every Heddle, whatever its users
    (the Helm chart carries a copy, compared with this by tests/deploy/test_deploy_security.py)."""
    runner_calls_, inspector_calls_ = runner_calls(), inspector_calls()
    heddle_exports = [
        *({"service": s, "accounts": [RUNNERS]} for s in runner_calls_),
        *({"service": s, "accounts": [INSPECT]} for s in inspector_calls_),
        *({"stream": s, "accounts": [INSPECT]} for s in LIVE_SUBJECTS),
    ]
    return {
        HEDDLE: {
            "exports": heddle_exports,
            "imports": [{"service": {"account": RUNNERS, "subject": names.RUNNER_ALL}}],
        },
        RUNNERS: {
            "exports": [{"service": names.RUNNER_ALL, "accounts": [HEDDLE]}],
            "imports": [{"service": {"account": HEDDLE, "subject": s}} for s in runner_calls_],
        },
        INSPECT: {
            "exports": [],
            "imports": [
                *({"service": {"account": HEDDLE, "subject": s}} for s in inspector_calls_),
                *({"stream": {"account": HEDDLE, "subject": s}} for s in LIVE_SUBJECTS),
            ],
        },
    }


def server_config(
    passwords: dict[str, str], extra: tuple[perms.User, ...] = (), store_max_bytes: int = 0
) -> dict[str, object]:
    """The ``accounts`` block of a nats-server configuration (JSON is valid NATS
    configuration): every user in ``passwords`` with its role's permissions, in its account,
    and ``extra`` users in the services' account. No user means no connection: anonymous
    clients are refused, as no ``no_auth_user`` is set. With ``store_max_bytes``, the
    services' account stores at most that many bytes (its ``max_file``; docs/storage.md)."""
    users = [perms.User(n, pw, perms.permissions_for(n)) for n, pw in sorted(passwords.items())]
    accounts: dict[str, dict[str, Any]] = {}
    for account, linked in links().items():
        accounts[account] = {"users": [], **linked}
    accounts[HEDDLE]["jetstream"] = {"max_file": store_max_bytes} if store_max_bytes else "enabled"
    placed = [(account_of(u.name), u) for u in users] + [(HEDDLE, u) for u in extra]
    for account, u in placed:
        entry = {"user": u.name, "password": u.password, "permissions": u.permissions.to_config()}
        accounts[account]["users"].append(entry)
    return {"accounts": accounts}


def users_in(config: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every user of an ``accounts`` block: its name, its account and its entry."""
    return {
        u["user"]: (account, u)
        for account, block in config["accounts"].items()
        for u in block.get("users", [])
    }
