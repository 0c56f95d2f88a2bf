"""Which state-changing requests a page on another origin could have sent (CSRF), decided
from the headers a browser sets and a page cannot: ``Origin`` and ``Sec-Fetch-Site``.

A page elsewhere can make a browser POST here without asking first (a form, or
``fetch(..., {mode: "no-cors"})``); with ``HEDDLE_AUTH=none`` nothing else would stop it.
So a ``POST``, ``PUT``, ``PATCH`` or ``DELETE`` is refused when:

1. ``Sec-Fetch-Site`` is ``cross-site`` or ``same-site``: the browser says so;
2. ``Origin`` is present and is not this gateway's own (``http`` or ``https`` with the
   request's Host, default ports alike; ``null`` is never own). Checked even with a JSON
   body, whatever ``Sec-Fetch-Site`` says: defence in depth, and a page's own calls always
   carry both right;
3. the request looks like a browser's (some ``Sec-Fetch-*`` header) without saying it is
   same-origin (``Sec-Fetch-Site: same-origin`` or ``none``, a user's own action), and its
   body is not JSON: ``application/json`` is a type a page elsewhere cannot send without a
   CORS preflight, which this gateway never grants.

Everything else goes on: a page's own calls (its browser sends ``Origin`` and
``Sec-Fetch-Site: same-origin``), and programs that send neither header, such as curl and
the heddle command line, even a bodiless ``POST /api/runs/{id}/cancel``. A proxy in front
must pass the Host header through unchanged (as HEDDLE_ALLOWED_HOSTS needs anyway), or the
page's own Origin will not match it.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FOREIGN_SITES = frozenset({"cross-site", "same-site"})
OWN_SITES = frozenset({"same-origin", "none"})  # none: typed, bookmarked, not a page's doing
FETCH_METADATA = ("sec-fetch-site", "sec-fetch-mode", "sec-fetch-dest", "sec-fetch-user")
DEFAULT_PORTS = {"http": 80, "https": 443}
JSON = "application/json"


def cross_origin_refusal(method: str, headers: Mapping[str, str], host: str | None) -> str | None:
    """Why a request may not go on, or None if it may. ``host`` is the request's Host header
    if the gateway answers to it (HEDDLE_ALLOWED_HOSTS), else None: no origin is then own."""
    if method.upper() not in STATE_CHANGING:
        return None
    sent = {name.lower(): value for name, value in headers.items()}
    site = sent.get("sec-fetch-site", "").strip().lower()
    if site in FOREIGN_SITES:
        return f"a {site} request may not {method.upper()} here (Sec-Fetch-Site: {site})"
    origin = sent.get("origin")
    if origin is not None:
        if same_origin(origin, host):
            return None
        shown = origin[:100].encode(errors="backslashreplace").decode()
        return f"origin {shown!r} is not this gateway's: a page elsewhere may not change anything"
    if site in OWN_SITES or not any(name in sent for name in FETCH_METADATA):
        return None
    if media_type(sent.get("content-type", "")) == JSON:
        return None
    return (
        "a browser's request that does not say it comes from this gateway's page needs a JSON "
        "body (Content-Type: application/json)"
    )


def same_origin(origin: str, host: str | None) -> bool:
    """Whether ``origin`` (``scheme://host[:port]``) names the gateway reached as ``host``.
    Either scheme is accepted: behind a TLS proxy the gateway cannot tell which was used."""
    if not host:
        return False
    try:
        theirs = urlsplit(origin.strip())
        ours = urlsplit("//" + host.strip())
        their_port, our_port = theirs.port, ours.port
    except ValueError:  # a port that is not a number, a bracket left open
        return False
    default = DEFAULT_PORTS.get(theirs.scheme)
    if default is None or not theirs.hostname or theirs.path or theirs.query:
        return False
    return theirs.hostname == ours.hostname and (their_port or default) == (our_port or default)


def media_type(content_type: str) -> str:
    """``application/json`` of ``Application/JSON; charset=utf-8``."""
    return content_type.partition(";")[0].strip().lower()
