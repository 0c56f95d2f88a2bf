"""The Host patterns of HEDDLE_ALLOWED_HOSTS and the auth settings' validation: pure, no I/O."""

from __future__ import annotations

import pytest
from heddle.shared.core.hosts import DEFAULT_ALLOWED_HOSTS, AllowedHosts, host_of, host_patterns
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire.errors import SettingsError


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        ("localhost:8080", True),
        ("LOCALHOST", True),
        ("localhost.", True),
        ("127.0.0.1:1234", True),
        ("[::1]:8080", True),
        ("[0:0:0:0:0:0:0:1]", True),
        ("gateway", True),  # the chart's Service
        ("blue-gateway:8080", True),  # with a release's namePrefix
        ("gateway.heddle.svc", True),
        ("blue-gateway.heddle.svc.cluster.local:8080", True),
        ("evil.example:8080", False),
        ("gateway.evil.example", False),  # * never spans a dot
        ("evilgateway.com", False),
        ("gateway.heddle.svc.evil.example", False),
        ("localhost.evil.example", False),
        ("10.0.0.7:8080", False),  # a pod IP: only the probes' routes skip the check
        ("", False),
        (None, False),
    ],
)
def test_default_hosts(header: str | None, allowed: bool) -> None:
    assert AllowedHosts(DEFAULT_ALLOWED_HOSTS).allows(header) is allowed


@pytest.mark.parametrize(
    ("listen", "header", "allowed"),
    [
        ("10.0.0.7", "10.0.0.7:8080", True),
        ("fd00::7", "[fd00::7]:8080", True),
        ("0.0.0.0", "0.0.0.0:8080", False),  # names no host
        ("::", "[::]:8080", False),
    ],
)
def test_the_listen_address_is_allowed(listen: str, header: str, allowed: bool) -> None:
    assert AllowedHosts("localhost", listen).allows(header) is allowed


def test_patterns() -> None:
    hosts = AllowedHosts("heddle.example.com, *.ci.example.com ,[fd00::1]")
    assert hosts.allows("heddle.example.com:443")
    assert hosts.allows("a.ci.example.com") and not hosts.allows("a.b.ci.example.com")
    assert hosts.allows("[fd00:0::1]:80")
    assert not hosts.allows("localhost")
    assert AllowedHosts("*").allows("anything.example:1")
    assert host_of("[::1]:8080") == "::1" and host_of("Host.Example.:80") == "host.example"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("localhost:8080", "has a port"),
        ("bad/name", "not a host name"),
        ("a b", "not a host name"),
        (" , ", "lists no host"),
    ],
)
def test_bad_patterns(text: str, words: str) -> None:
    _, problems = host_patterns(text)
    assert len(problems) == 1 and words in problems[0]


def test_auth_settings() -> None:
    s = Settings.from_env({})
    assert (s.auth, s.metrics_auth, s.admin_token_file) == ("tokens", "open", "")
    env = {"HEDDLE_AUTH": "none", "HEDDLE_METRICS_AUTH": "token", "HEDDLE_ALLOWED_HOSTS": "a,b"}
    s = Settings.from_env(env)
    assert (s.auth, s.metrics_auth, s.allowed_hosts) == ("none", "token", "a,b")
    bad = {"HEDDLE_AUTH": "off", "HEDDLE_METRICS_AUTH": "yes", "HEDDLE_ALLOWED_HOSTS": "x:1"}
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(bad)
    assert [p.split(" ")[0] for p in caught.value.problems] == [
        "HEDDLE_AUTH",
        "HEDDLE_METRICS_AUTH",
        "HEDDLE_ALLOWED_HOSTS:",
    ]
