"""The NATS users of a local Heddle (``heddle up``, the tests, the benchmark): passwords
generated once per data dir and kept there, the server's configuration written from
shared/broker/nats_permissions.py, and a ``nats`` CLI context for the inspector and for each
namespace's (``inspector-<namespace>``). Every file is the owner's alone (0600)."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from heddle.shared.broker import nats_accounts
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.core.namespaces import namespace_problems

PASSWORDS_FILE = "nats-users.json"
CONFIG_FILE = "nats-auth.conf"
CONTEXT_FILE = "nats-context.json"


def namespace_context_file(namespace: str) -> str:
    """A namespace inspector's ``nats`` CLI context, beside the inspector's."""
    return f"nats-context-{namespace}.json"


def inspector_namespaces_problems(namespaces: list[str]) -> list[str]:
    """Every problem with the namespaces given their own inspector (``--inspector-namespace``)."""
    return [p.message for ns in namespaces for p in namespace_problems(ns, "inspector-namespace")]


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)  # an existing file keeps its mode through O_CREAT
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass
class NatsUsers:
    data_dir: Path
    passwords: dict[str, str]
    extra: tuple[perms.User, ...] = ()  # users outside Heddle's roles (a test's own)
    store_max_bytes: int = 0  # the services' account's store limit (0: none)

    @classmethod
    def load(
        cls, data_dir: Path, extra: tuple[perms.User, ...] = (), store_max_bytes: int = 0
    ) -> NatsUsers:
        """The data dir's users, with a password for every service, the inspector and the
        backup user (created on the first call, kept on later ones)."""
        path = Path(data_dir) / PASSWORDS_FILE
        passwords: dict[str, str] = {}
        if path.exists():
            passwords = json.loads(path.read_text())
        users = cls(Path(data_dir), passwords, extra, store_max_bytes)
        for user in (*perms.SERVICES, perms.INSPECTOR, perms.BACKUP):
            users.ensure(user)
        return users

    def ensure(self, user: str) -> bool:
        """Give ``user`` a password if it has none; True if it is new."""
        if user in self.passwords:
            return False
        perms.permissions_for(user)  # a user with no role is an error here, not at connect
        self.passwords[user] = secrets.token_urlsafe(24)
        return True

    def ensure_runners(self, runners: list[str]) -> bool:
        new = [self.ensure(perms.runner_user(r)) for r in runners]
        return any(new)

    def keep_namespace_inspectors(self, namespaces: list[str]) -> list[str]:
        """Exactly these namespaces' inspectors: one no longer asked for keeps no way in.
        Returns the users removed."""
        wanted = {perms.namespace_inspector_user(ns) for ns in namespaces}
        prefix = perms.NAMESPACE_INSPECTOR_PREFIX
        gone = [u for u in self.passwords if u.startswith(prefix) and u not in wanted]
        for user in gone:
            del self.passwords[user]
        for user in sorted(wanted):
            self.ensure(user)
        return gone

    @property
    def config_path(self) -> Path:
        return self.data_dir / CONFIG_FILE

    def save(self) -> None:
        """Write the passwords, the server's configuration and the inspector's context."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_private(self.data_dir / PASSWORDS_FILE, json.dumps(self.passwords, indent=2))
        config = nats_accounts.server_config(self.passwords, self.extra, self.store_max_bytes)
        # NATS configuration takes JSON values: `accounts: {...}`, included by the
        # server's own file (services/local/embedded_nats.py).
        text = "".join(f"{k}: {json.dumps(v, indent=2)}\n" for k, v in config.items())
        write_private(self.config_path, text)

    def save_context(self, url: str) -> Path:
        """``nats --context <this file>``: the read-only inspector."""
        return self._context(CONTEXT_FILE, "Heddle's read-only inspector", url, perms.INSPECTOR)

    def save_namespace_contexts(self, url: str) -> list[Path]:
        """One context per namespace inspector; those of inspectors no longer kept removed."""
        prefix = perms.NAMESPACE_INSPECTOR_PREFIX
        for old in self.data_dir.glob(namespace_context_file("*")):
            if prefix + old.name[len("nats-context-") : -len(".json")] not in self.passwords:
                old.unlink(missing_ok=True)
        return [
            self._context(
                namespace_context_file(user[len(prefix) :]),
                f"Heddle's inspector of namespace {user[len(prefix) :]}'s logs",
                url,
                user,
            )
            for user in sorted(self.passwords)
            if user.startswith(prefix)
        ]

    def _context(self, name: str, description: str, url: str, user: str) -> Path:
        path = self.data_dir / name
        context = {
            "description": description,
            "url": url,
            "user": user,
            "password": self.passwords[user],
        }
        write_private(path, json.dumps(context, indent=2))
        return path

    def env(self, user: str) -> dict[str, str]:
        """A service's environment for connecting as ``user``."""
        return {"HEDDLE_NATS_USER": user, "HEDDLE_NATS_PASSWORD": self.passwords[user]}

    def runner_env(self, runner: str) -> dict[str, str]:
        return {"HEDDLE_RUNNER_NAME": runner, **self.env(perms.runner_user(runner))}
