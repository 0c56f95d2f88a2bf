"""API tokens: the token routes, a revocation seen by a second gateway, the bootstrap admin
token, and `heddle token` as a subprocess against a gateway on a real port."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest
from heddle.shared.core.tokens import new_token, token_hash, token_record_decoder
from heddle.shared.wire import names
from heddle.shared.wire.errors import TokenFileError
from nats.aio.client import Client

from tests.support.cli import heddle
from tests.support.gateway_apps import Gateway, call, make_token, root, status_becomes
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway

# ---- tokens ------------------------------------------------------------------------------


async def test_token_routes(gateway: Gateway, admin_file: Path, heddle_nc: Client) -> None:
    gw = await gateway()
    boss = root(admin_file)
    status, made = await call(
        gw, "POST", "/api/tokens", boss, json={"name": "ci", "role": "operator"}
    )
    assert status == 201 and set(made) == {"name", "role", "token", "createdAt", "namespaces"}
    token = made["token"]
    assert token.startswith("hdl_") and len(token) > 40
    assert (await call(gw, "GET", "/api/runs", token))[0] == 200

    status, listed = await call(gw, "GET", "/api/tokens", boss)
    assert status == 200
    by_name = {t["name"]: t for t in listed["tokens"]}
    assert set(by_name) == {"admin", "ci"}
    assert by_name["ci"] == {
        "name": "ci",
        "role": "operator",
        "createdAt": made["createdAt"],
        "revoked": False,
        "revokedAt": None,
        "namespaces": {"default": "operator"},  # made without namespaces: default's
        "systemAdmin": False,
    }
    assert by_name["admin"]["role"] == "admin" and by_name["admin"]["systemAdmin"] is True
    assert token not in str(listed) and token_hash(token) not in str(listed)
    # The bucket holds the hash, never the token.
    kv = await heddle_nc.jetstream().key_value(names.TOKENS_BUCKET)
    stored = token_record_decoder.decode((await kv.get("ci")).value or b"")
    assert stored.hash == token_hash(token) and stored.role == "operator"
    assert token.encode() not in (await kv.get("ci")).value

    status, body = await call(
        gw, "POST", "/api/tokens", boss, json={"name": "ci", "role": "viewer"}
    )
    assert status == 409 and "ci" in body["error"]
    status, body = await call(
        gw, "POST", "/api/tokens", boss, json={"name": "bad name", "role": "boss", "x": 1}
    )
    assert status == 400
    assert {p["path"] for p in body["problems"]} == {"name", "role", "x"}
    assert "viewer, operator, admin" in next(
        p["message"] for p in body["problems"] if p["path"] == "role"
    )
    form = {"Content-Type": "text/plain"}
    assert (await call(gw, "POST", "/api/tokens", boss, data="name=x", headers=form))[0] == 415

    status, body = await call(gw, "POST", "/api/tokens/ci/revoke", boss)
    assert status == 200 and body["revoked"] is True and body["revokedAt"]
    status, again = await call(gw, "POST", "/api/tokens/ci/revoke", boss)
    assert (status, again) == (200, body)  # idempotent: the first revocation stands
    status, body = await call(gw, "GET", "/api/runs", token)
    assert status == 401 and body["error"] == "token 'ci' was revoked"
    assert (await call(gw, "POST", "/api/tokens/nobody/revoke", boss))[0] == 404
    # An admin may revoke its own token.
    second = await make_token(gw, admin_file, "second", "admin")
    assert (await call(gw, "POST", "/api/tokens/second/revoke", second))[0] == 200
    assert (await call(gw, "GET", "/api/tokens", second))[0] == 401


async def test_revoked_on_one_gateway_is_refused_by_another(
    gateway: Gateway, admin_file: Path
) -> None:
    one, two = await gateway(), await gateway()
    token = await make_token(one, admin_file, "roaming", "viewer")

    async def status_on_two() -> int:
        return (await call(two, "GET", "/api/runs", token))[0]

    await status_becomes(status_on_two, 200)  # made on one, known to two
    t0 = time.monotonic()
    assert (await call(one, "POST", "/api/tokens/roaming/revoke", root(admin_file)))[0] == 200
    await status_becomes(status_on_two, 401, within=5.0)
    assert time.monotonic() - t0 < 5.0
    assert (await call(one, "GET", "/api/runs", token))[0] == 401


async def test_admin_token_file_seeds_once(
    gateway: Gateway, admin_file: Path, tmp_path: Path, heddle_nc: Client
) -> None:
    first = await gateway()
    boss = root(admin_file)
    assert (await call(first, "GET", "/api/tokens", boss))[0] == 200
    kv = await heddle_nc.jetstream().key_value(names.TOKENS_BUCKET)
    assert boss.encode() not in (await kv.get("admin")).value
    assert (await call(first, "POST", "/api/tokens/admin/revoke", boss))[0] == 200
    # A restart with the same file does not bring a revoked admin back.
    again = await gateway()
    assert (await call(again, "GET", "/api/runs", boss))[0] == 401
    # Another token in the file is not taken while a token named admin exists.
    other = tmp_path / "other-token"
    other.write_text(new_token())
    third = await gateway(admin_token_file=str(other))
    assert (await call(third, "GET", "/api/runs", other.read_text()))[0] == 401
    # A file that cannot hold a token stops the gateway, without quoting it.
    short = tmp_path / "short-token"
    short.write_text("abc123")
    with pytest.raises(TokenFileError) as caught:
        await gateway(admin_token_file=str(short))
    assert "shorter than" in str(caught.value) and "abc123" not in str(caught.value)


# ---- the CLI -------------------------------------------------------------------------------


async def test_cli(gateway: Gateway, admin_file: Path, tmp_path: Path) -> None:
    gw = await gateway()
    url = str(gw.make_url("")).rstrip("/")
    common = ("token", "--url", url, "--token-file", str(admin_file))

    rc, out, err = await heddle(*common, "create", "--role", "viewer", "--name", "cli-v")
    assert rc == 0, err
    token = out.strip()
    assert out == token + "\n" and token.startswith("hdl_")  # the token alone, once
    assert token not in err and "shown this once" in err
    assert (await call(gw, "GET", "/api/runs", token))[0] == 200

    rc, out, err = await heddle(*common, "list")
    assert rc == 0, err
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [
        ["admin", "admin"],
        ["cli-v", "default:viewer"],
    ]
    assert token not in out
    env = {"HEDDLE_URL": url, "HEDDLE_TOKEN": root(admin_file)}
    rc, out, _ = await heddle("token", "list", "--json", env=env)
    assert rc == 0 and {t["name"] for t in msgspec.json.decode(out)["tokens"]} == {"admin", "cli-v"}

    # The options may also follow the action, as people type them.
    rc, out, err = await heddle(
        "token", "revoke", "cli-v", "--url", url, "--token-file", str(admin_file)
    )
    assert rc == 0, err
    assert (await call(gw, "GET", "/api/runs", token))[0] == 401

    rc, out, err = await heddle(*common, "create", "--role", "boss", "--name", "x")
    assert (rc, out) == (2, "") and "viewer" in err and "admin" in err
    rc, out, err = await heddle(*common, "create", "--role", "viewer", "--name", "bad name")
    assert (rc, out) == (1, "") and "400" in err and "name:" in err
    rc, out, err = await heddle(*common, "create", "--role", "viewer", "--name", "admin")
    assert (rc, out) == (1, "") and "409" in err
    # A viewer's token is refused (403, the role named); no token file is a usage error.
    viewer_file = tmp_path / "viewer-token"
    viewer_file.write_text(await make_token(gw, admin_file, "v2", "viewer"))
    rc, _, err = await heddle("token", "--url", url, "--token-file", str(viewer_file), "list")
    assert rc == 1 and "admin role" in err
    rc, _, err = await heddle("token", "--url", url, "--token-file", str(tmp_path / "no"), "list")
    assert rc == 2 and "cannot read" in err
