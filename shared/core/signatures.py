"""The HMAC-SHA256 signature of a webhook delivery or a notification, as GitHub writes its
``X-Hub-Signature-256``: ``sha256=<hex>`` of the body under the secret. Pure: no I/O."""

from __future__ import annotations

import hashlib
import hmac
import secrets

PREFIX = "sha256="
HEDDLE_HEADER = "X-Heddle-Signature-256"
GITHUB_HEADER = "X-Hub-Signature-256"
HEDDLE_DELIVERY = "X-Heddle-Delivery"
GITHUB_DELIVERY = "X-GitHub-Delivery"


def new_secret() -> str:
    """A fresh secret: 32 random bytes as hex."""
    return secrets.token_hex(32)


def sign(secret: str, body: bytes) -> str:
    return PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signed_by(secret: str, body: bytes, signature: str | None) -> bool:
    """Whether ``signature`` is the body's under ``secret``, compared in constant time."""
    if not signature or not signature.startswith(PREFIX):
        return False
    return hmac.compare_digest(sign(secret, body), signature.strip())
