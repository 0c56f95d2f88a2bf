"""services/gateway/http/origin.py: which requests a page on another origin could make a browser
send (CSRF) are refused, as a table of methods and headers; and which Origin is the gateway's
own. Real requests to gateways, and the attack that was found: tests/integration/test_csrf.py."""

from __future__ import annotations

import pytest
from heddle.services.gateway.http.origin import cross_origin_refusal, same_origin

from tests.support.origins import EVIL, HOST, JSON, NO_CORS, OWN, PAGE

ALLOWED = [
    ("GET", NO_CORS),  # reads change nothing
    ("HEAD", NO_CORS),
    ("OPTIONS", NO_CORS),
    ("POST", {}),  # curl -XPOST, the heddle command line's cancel: no body, no browser
    ("POST", {"Content-Type": "text/plain"}),  # not a browser: the 415 is another check's
    ("DELETE", {}),
    ("POST", JSON),
    ("POST", PAGE),  # the page's cancel and retry: no body
    ("PATCH", {**PAGE, **JSON}),
    ("POST", {"Origin": OWN}),  # a browser without fetch metadata (Safari before 16.4)
    ("POST", {"Origin": "https://127.0.0.1:8080"}),  # behind a TLS proxy
    ("POST", {"origin": OWN, "sec-fetch-site": "same-origin"}),  # names in any case
    ("POST", {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}),
    ("POST", {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}),  # the user's own
    ("POST", {"Sec-Fetch-Mode": "cors", "Content-Type": "application/json; charset=utf-8"}),
]
REFUSED = [
    ("POST", NO_CORS),  # the attack
    ("post", NO_CORS),
    ("PUT", NO_CORS),
    ("PATCH", NO_CORS),
    ("DELETE", NO_CORS),
    ("POST", {**NO_CORS, **JSON}),  # an explicit foreign origin, whatever the body
    ("POST", {"Origin": EVIL}),  # a browser without fetch metadata
    ("POST", {"Origin": EVIL, **JSON}),
    ("POST", {"Origin": "null"}),  # a sandboxed frame, a file:// page
    ("POST", {"Origin": "http://127.0.0.1:8081"}),  # another port is another origin
    ("POST", {"Origin": "http://localhost:8080"}),  # the same machine by another name
    ("POST", {"Origin": "http://127.0.0.1"}),
    ("POST", {"Sec-Fetch-Site": "cross-site"}),
    ("POST", {"Sec-Fetch-Site": "same-site", **JSON}),  # a sibling subdomain
    ("POST", {"Origin": OWN, "Sec-Fetch-Site": "cross-site"}),
    ("POST", {"Origin": EVIL, "Sec-Fetch-Site": "same-origin"}),
    ("POST", {"Sec-Fetch-Mode": "no-cors"}),  # a browser that does not say where from
    ("POST", {"Sec-Fetch-Dest": "empty", "Content-Type": "text/plain"}),
    ("POST", {"Sec-Fetch-Site": "unheard-of", "Sec-Fetch-Mode": "cors"}),
]


@pytest.mark.parametrize(("method", "headers"), ALLOWED)
def test_allowed(method: str, headers: dict[str, str]) -> None:
    assert cross_origin_refusal(method, headers, HOST) is None


@pytest.mark.parametrize(("method", "headers"), REFUSED)
def test_refused(method: str, headers: dict[str, str]) -> None:
    assert cross_origin_refusal(method, headers, HOST) is not None


def test_no_origin_is_own_when_the_host_is_not_the_gateway_s() -> None:
    assert cross_origin_refusal("POST", {"Origin": OWN}, None) is not None
    assert cross_origin_refusal("POST", {}, None) is None  # not a browser


@pytest.mark.parametrize(
    ("origin", "host", "own"),
    [
        ("http://127.0.0.1:8080", "127.0.0.1:8080", True),
        ("http://LOCALHOST:8080", "localhost:8080", True),
        ("http://heddle.example.com", "heddle.example.com", True),
        ("http://heddle.example.com:80", "heddle.example.com", True),
        ("https://heddle.example.com", "heddle.example.com", True),
        ("https://heddle.example.com", "heddle.example.com:443", True),
        ("http://[::1]:8080", "[::1]:8080", True),
        ("http://heddle.example.com", "heddle.example.com:443", False),
        ("http://heddle.example.com.evil.example", "heddle.example.com", False),
        ("http://evil.example", "heddle.example.com", False),
        ("http://127.0.0.1:8080/path", "127.0.0.1:8080", False),
        ("null", "127.0.0.1:8080", False),
        ("file://", "127.0.0.1:8080", False),
        ("ftp://127.0.0.1:8080", "127.0.0.1:8080", False),
        ("http://127.0.0.1:99999", "127.0.0.1:99999", False),
        ("http://[::1", "[::1", False),
        ("http://127.0.0.1:8080", "", False),
        ("http://127.0.0.1:8080", None, False),
    ],
)
def test_same_origin(origin: str, host: str | None, own: bool) -> None:
    assert same_origin(origin, host) is own
