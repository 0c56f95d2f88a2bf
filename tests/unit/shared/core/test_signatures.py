"""Signing a delivery as GitHub signs its webhooks (shared/core/signatures.py)."""

from __future__ import annotations

from heddle.shared.core.signatures import new_secret, sign, signed_by


def test_githubs_own_example_signature() -> None:
    """The example in GitHub's documentation of X-Hub-Signature-256."""
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign("It's a Secret to Everybody", b"Hello, World!") == expected


def test_only_the_bodys_signature_under_the_secret_passes() -> None:
    secret, body = new_secret(), b'{"ref":"refs/heads/main"}'
    assert len(secret) == 64 and secret != new_secret()
    good = sign(secret, body)
    assert signed_by(secret, body, good)
    assert signed_by(secret, body, good + "\n")  # a header's trailing space
    assert not signed_by(secret, body + b" ", good)
    assert not signed_by(new_secret(), body, good)
    assert not signed_by(secret, body, good.removeprefix("sha256="))
    assert not signed_by(secret, body, "sha1=" + good[7:])
    assert not signed_by(secret, body, None)
    assert not signed_by(secret, body, "")
