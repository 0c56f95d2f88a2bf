"""`heddle nats-users --dir DIR [--runners N] [--inspector-namespace NS ...]`: the NATS users
and the first admin token of a Heddle whose parts are started by something that cannot make
secrets itself (Docker Compose's one-shot init service, see docker-compose.yml).

It writes, every file 0600:

    DIR/nats-users.json          every user's password (kept: a second run changes nothing)
    DIR/nats-auth.conf           the server's `accounts` block, for nats-server --config
    DIR/<user>/password          one user's password, for HEDDLE_NATS_PASSWORD_FILE
    DIR/gateway/admin-token      the first admin API token, for HEDDLE_ADMIN_TOKEN_FILE

One directory per user, so each can be its own volume and a container mounts its own password
alone. The users are the services, the inspector, backup (docs/backup.md) and
runner-runner-0 ... runner-runner-<N-1> (runners named runner-0 ...), and inspector-<NS> for
each ``--inspector-namespace`` (it may watch NS's logs alone); a runner user beyond N, or a
namespace inspector not asked for, is removed. ``--owner`` and
``--runner-owner`` (needs root) hand each user's directory and files to the uid that reads them:
a runner started as root with its capabilities dropped cannot read another uid's 0600 file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from heddle.services.local.nats_users import (
    CONFIG_FILE,
    PASSWORDS_FILE,
    NatsUsers,
    inspector_namespaces_problems,
    write_private,
)
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.core.tokens import new_token

PASSWORD_FILE = "password"
ADMIN_TOKEN_FILE = "admin-token"
Owner = tuple[int, int]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "nats-users",
        help="write NATS users, their password files and an admin token into a directory",
    )
    p.add_argument("--dir", required=True, help="where to write (made if missing)")
    p.add_argument(
        "--runners", type=int, default=1, help="runner users for runner-0 ... (default 1)"
    )
    p.add_argument(
        "--inspector-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="a user inspector-NS that may watch namespace NS's logs (repeatable)",
    )
    p.add_argument("--owner", type=owner_arg, default=None, help="UID:GID of every file")
    p.add_argument(
        "--runner-owner",
        type=owner_arg,
        default=None,
        help="UID:GID of the runners' files (default --owner)",
    )


def owner_arg(text: str) -> Owner:
    uid, sep, gid = text.partition(":")
    if not (uid.isdigit() and sep and gid.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not UID:GID (numbers)")
    return int(uid), int(gid)


def runner_names(count: int) -> list[str]:
    return [f"runner-{i}" for i in range(count)]


def write(
    directory: Path,
    runners: int,
    owner: Owner | None,
    runner_owner: Owner | None,
    inspector_namespaces: list[str] | None = None,
) -> list[str]:
    """Write every file (see the module's doc); the users, sorted."""
    directory.mkdir(parents=True, exist_ok=True)
    users = NatsUsers.load(directory)
    wanted = {perms.runner_user(r) for r in runner_names(runners)}
    for user in list(users.passwords):
        if user.startswith(perms.RUNNER_PREFIX) and user not in wanted:
            del users.passwords[user]  # a runner no longer run keeps no way in
            (directory / user / PASSWORD_FILE).unlink(missing_ok=True)
    for user in users.keep_namespace_inspectors(inspector_namespaces or []):
        (directory / user / PASSWORD_FILE).unlink(missing_ok=True)
    users.ensure_runners(runner_names(runners))
    users.save()
    for name in (PASSWORDS_FILE, CONFIG_FILE):
        chown(directory / name, owner)
    for user, password in sorted(users.passwords.items()):
        user_dir = directory / user
        user_dir.mkdir(exist_ok=True)
        os.chmod(user_dir, 0o700)
        write_private(user_dir / PASSWORD_FILE, password + "\n")
        who = (runner_owner or owner) if user.startswith(perms.RUNNER_PREFIX) else owner
        chown(user_dir / PASSWORD_FILE, who)
        chown(user_dir, who)
    token = directory / perms.GATEWAY / ADMIN_TOKEN_FILE
    if not token.exists() or not token.read_text().strip():  # made once, the same one after
        write_private(token, new_token() + "\n")
    chown(token, owner)
    return sorted(users.passwords)


def chown(path: Path, owner: Owner | None) -> None:
    if owner is not None:
        os.chown(path, *owner)


def run(args: argparse.Namespace) -> int:
    problems = ["--runners must be 0 or more"] if args.runners < 0 else []
    problems += inspector_namespaces_problems(args.inspector_namespace)
    if problems:
        print(f"heddle nats-users: {'; '.join(problems)}", file=sys.stderr)
        return 2
    directory = Path(args.dir)
    try:
        users = write(
            directory, args.runners, args.owner, args.runner_owner, args.inspector_namespace
        )
    except OSError as exc:
        print(f"heddle nats-users: {exc}", file=sys.stderr)
        return 1
    # Names and paths only: the secrets stay in their files.
    print(f"NATS users in {directory}: {', '.join(users)}")
    print(f"server configuration: {directory / CONFIG_FILE}")
    print(f"admin token: {directory / perms.GATEWAY / ADMIN_TOKEN_FILE}")
    return 0
