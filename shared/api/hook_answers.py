"""The answers of the webhook routes (docs/webhooks.md): a secret made for a hook or a
notify target, shown once, and a ping's answer."""

from __future__ import annotations

from heddle.shared.api.answers import Doc


class HookSecret(Doc):
    """A webhook's new secret: deliveries are signed with it from now on."""

    workflow: str
    namespace: str
    hook: str
    secret: str


class NotifySecret(Doc):
    """A notify target's new secret: its notifications are signed with it from now on."""

    workflow: str
    namespace: str
    index: int
    secret: str


class Pong(Doc):
    """A sender's ping (GitHub's ``X-GitHub-Event: ping``), signed right: no run."""

    workflow: str
    namespace: str
    hook: str
    pong: bool = True
