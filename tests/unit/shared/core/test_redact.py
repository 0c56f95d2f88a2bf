"""shared/core/redact.py, as a table: each text, and what of it must not survive redaction."""

from __future__ import annotations

import json

import pytest
from heddle.shared.core.redact import MARK, TOKEN_MARK, redact
from heddle.shared.core.tokens import new_token
from heddle.shared.runtime.service import json_line

# Fixed, so that every test worker collects the same parameters; shaped as new_token() makes.
TOKEN = "hdl_Zm9vYmFy-LXh5ej_0123456789abcdefghijklmnopqrstu"
HANDMADE = "my-own-admin-token-0123456789"  # a bootstrap token need not start with hdl_

# (text, the secret in it)
CASES = [
    (TOKEN, TOKEN),
    (f"token {TOKEN} seen", TOKEN),
    (f"Authorization: Bearer {HANDMADE}", HANDMADE),
    (f"authorization:bearer   {HANDMADE}\r\nHost: x", HANDMADE),
    (f"AUTHORIZATION: {HANDMADE}", HANDMADE),
    (f"Authorization: Basic {HANDMADE}", HANDMADE),
    (f"Authorization=Bearer%20{HANDMADE}", HANDMADE),
    (f"{{'Authorization': 'Bearer {HANDMADE}', 'Host': 'x'}}", HANDMADE),
    (f"<CIMultiDictProxy('Host': 'x', 'Authorization': 'Bearer {HANDMADE}')>", HANDMADE),
    (json.dumps({"Authorization": f"Bearer {HANDMADE}"}), HANDMADE),
    # aiohttp's LineTooLong quotes the over-long header's value, not its name.
    (f"Got more than 8190 bytes when reading: b'Bearer {HANDMADE}xxxxxxxx...'.", HANDMADE),
    (f"Got more than 8190 bytes when reading: b'Bearer {TOKEN}xxxxxxxx...'.", TOKEN),
    # aiohttp's InvalidURLError quotes the request line, a NUL escaped.
    (f"Invalid char in url query:\n\n    b'GET /?token={HANDMADE}\\x00 HTTP/1.1'", HANDMADE),
    (f"GET /api/runs?x=1&token={HANDMADE}&y=2", HANDMADE),
    (f"GET /?TOKEN={HANDMADE}#top", HANDMADE),
    (f"http://gw:8080/?token={TOKEN}", TOKEN),
    (f"b'GET /?token={TOKEN}\\x00 HTTP/1.1'", TOKEN),
    (f"a traceback\n  File x, line 1\nLineTooLong: b'Authorization: Bearer {TOKEN}'", TOKEN),
    (TOKEN[:20] + "...", TOKEN[:20]),  # a token cut short is still a token
]


@pytest.mark.parametrize(("text", "secret"), CASES)
def test_the_secret_is_gone(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert MARK in out  # replaced, not dropped
    assert redact(out) == out  # a redacted text stays as it is


@pytest.mark.parametrize(
    "text",
    [
        "run r1 succeeded",
        "token 'ci' was revoked",
        "no API token exists: every API request will be refused (401)",
        "GET /api/runs?limit=10&after=x",
        "a tokenizer=3 and hdl alone",
        "",
    ],
)
def test_text_without_a_secret_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_every_token_heddle_makes_is_caught_whole() -> None:
    for _ in range(200):
        assert redact(new_token()) == TOKEN_MARK


def test_the_marks() -> None:
    assert redact(f"x {TOKEN} y") == f"x {TOKEN_MARK} y"
    assert redact(f"Authorization: Bearer {HANDMADE}") == f"Authorization: Bearer {MARK}"
    assert redact(f"/?token={HANDMADE}&a=1") == f"/?token={MARK}&a=1"


def test_a_log_line_holds_no_token_in_its_message_exception_or_fields() -> None:
    line = json_line(
        0.0,
        "error",
        "aiohttp.server",
        f"Error handling request: Bearer {HANDMADE}",
        {"url": f"/?token={TOKEN}", "nested": {"headers": [f"Authorization: {HANDMADE}"]}},
        f"LineTooLong: b'Bearer {TOKEN}'",
    )
    assert TOKEN not in line and HANDMADE not in line
    doc = json.loads(line)  # still one JSON object
    assert doc["url"] == f"/?token={MARK}"
