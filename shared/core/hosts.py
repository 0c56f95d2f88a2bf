"""Which ``Host`` headers the gateway answers (``HEDDLE_ALLOWED_HOSTS``). Pure logic, no I/O.

A page on another site whose domain is made to resolve to the gateway's address (DNS
rebinding) sends its own domain as the Host: answering only known names keeps such a page
from reading the API. A pattern is a host name (case does not matter, no port), in which
``*`` stands for any part of one label (never a dot), so ``*gateway`` is ``gateway`` and
``blue-gateway`` but not ``gateway.evil.example``; ``*`` alone allows any host.

The default names the chart's Service with any release prefix (``<namePrefix>gateway``, see
deploy/helm/heddle/templates/services.yaml) in its cluster-internal forms. It leaves out
``gateway.<namespace>``: ``*gateway.*`` would also match a domain anyone can register.
"""

from __future__ import annotations

import ipaddress
import re

DEFAULT_ALLOWED_HOSTS = (
    "localhost,127.0.0.1,::1,*gateway,*gateway.*.svc,*gateway.*.svc.cluster.local"
)
ANY_ADDRESS = ("", "0.0.0.0", "::")  # a listen address that names no host
_NAME = re.compile(r"^[a-z0-9*_-]+(\.[a-z0-9*_-]+)*\Z")


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _normal(pattern: str) -> str:
    pattern = pattern.strip().lower().rstrip(".")
    if pattern.startswith("[") and pattern.endswith("]"):
        pattern = pattern[1:-1]
    return pattern


def host_patterns(text: str) -> tuple[list[re.Pattern[str]], list[str]]:
    """The patterns of a comma-separated list, and every problem with it."""
    patterns: list[re.Pattern[str]] = []
    problems: list[str] = []
    for raw in text.split(","):
        item = _normal(raw)
        if not item:
            continue
        if item == "*":
            patterns.append(re.compile(r".*", re.S))
        elif _ipv6(item):
            patterns.append(re.compile(re.escape(str(ipaddress.IPv6Address(item)))))
        elif ":" in item:
            problems.append(f"{raw.strip()!r} has a port: list host names only")
        elif not _NAME.match(item):
            problems.append(f"{raw.strip()!r} is not a host name (letters, digits, - _ . and *)")
        else:
            parts = (re.escape(p) for p in item.split("*"))
            patterns.append(re.compile("[^.]*".join(parts)))
    if not patterns and not problems:
        problems.append("lists no host")
    return patterns, problems


def host_of(header: str) -> str:
    """The host name of a Host header: lower case, without port, brackets or a final dot."""
    header = header.strip().lower()
    if header.startswith("["):
        return _canonical(header[1 : header.find("]")] if "]" in header else header[1:])
    if header.count(":") == 1:
        header = header.split(":", 1)[0]
    return _canonical(header.rstrip("."))


def _canonical(host: str) -> str:
    return str(ipaddress.IPv6Address(host)) if _ipv6(host) else host


class AllowedHosts:
    """The hosts a gateway answers: the setting's patterns, and its listen address."""

    def __init__(self, text: str, listen: str = "") -> None:
        self.patterns, problems = host_patterns(text)
        if problems:
            raise ValueError("; ".join(problems))
        if listen.strip() not in ANY_ADDRESS:
            self.patterns.append(re.compile(re.escape(host_of(listen))))

    def allows(self, header: str | None) -> bool:
        if not header:
            return False
        host = host_of(header)
        return any(p.fullmatch(host) for p in self.patterns)
