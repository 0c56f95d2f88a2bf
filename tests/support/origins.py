"""Headers a browser sends with a request: from the gateway's own page, and from a page on
another site."""

from __future__ import annotations

HOST = "127.0.0.1:8080"
OWN = "http://127.0.0.1:8080"
EVIL = "http://evil.example"
JSON = {"Content-Type": "application/json"}
# What Chromium sends with fetch(url, {method: "POST", mode: "no-cors"}) from another site.
NO_CORS = {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}
# What it sends with the page's own fetch calls.
PAGE = {"Origin": OWN, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}
