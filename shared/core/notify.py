"""A workflow's ``notify`` targets as a user wrote them, checked (docs/notifications.md).
Pure: no I/O."""

from __future__ import annotations

import re

from heddle.shared.wire.errors import Problem

MAX_TARGETS = 10
NOTIFY_FIELDS = {"url", "on", "secret"}
RUN_ENDS = ("succeeded", "failed", "cancelled")
# An http(s) address with a host (a name, an IPv4 or a bracketed IPv6), an optional port,
# then anything: what a target may be (``urllib`` is I/O's, and this module is pure).
HTTP_URL = re.compile(r"https?://(\[[0-9A-Fa-f:.]+\]|[^\s/?#:@\[\]]+)(:\d{1,5})?([/?#]\S*)?\Z")


def notify_problems(value: object, *, inline: bool) -> list[Problem]:
    """Every problem of ``notify``. ``inline``: a run's own document, which has no secret to
    sign with (secrets are made for a registered workflow)."""
    if not isinstance(value, list):
        return [Problem("notify", "notify must be a list")]
    if len(value) > MAX_TARGETS:
        return [Problem("notify", f"{len(value)} targets; the limit is {MAX_TARGETS}")]
    problems: list[Problem] = []
    for i, target in enumerate(value):
        path = f"notify[{i}]"
        if not isinstance(target, dict):
            problems.append(Problem(path, "a notify target must be an object with a url"))
            continue
        problems.extend(
            Problem(f"{path}.{k}", "unknown field") for k in sorted(set(target) - NOTIFY_FIELDS)
        )
        problems.extend(_url_problems(target.get("url"), f"{path}.url"))
        on = target.get("on", list(RUN_ENDS))
        if not isinstance(on, list) or not on or not all(o in RUN_ENDS for o in on):
            problems.append(
                Problem(f"{path}.on", f"on must list run ends among {', '.join(RUN_ENDS)}")
            )
        secret = target.get("secret", False)
        if not isinstance(secret, bool):
            problems.append(Problem(f"{path}.secret", "secret must be true or false"))
        elif secret and inline:
            problems.append(
                Problem(f"{path}.secret", "only a registered workflow's target is signed")
            )
    return problems


def _url_problems(url: object, path: str) -> list[Problem]:
    if not isinstance(url, str):
        return [Problem(path, "missing required field" if url is None else "url must be a string")]
    if not HTTP_URL.match(url):
        return [Problem(path, "url must be an http:// or https:// address with a host")]
    return []
