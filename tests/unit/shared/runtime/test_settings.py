"""shared/runtime/settings.py: defaults, overrides from a mapping, and every problem in one
error."""

from __future__ import annotations

from dataclasses import fields

import pytest
from heddle.shared.runtime.settings import Settings, env_name
from heddle.shared.wire.errors import SettingsError


def test_defaults() -> None:
    s = Settings.from_env({})
    assert s == Settings()
    assert (s.nats_url, s.storage, s.replicas) == ("nats://127.0.0.1:4222", "file", 1)
    assert (s.gateway_host, s.gateway_port) == ("127.0.0.1", 8080)
    assert (s.max_steps, s.max_command_bytes) == (100_000, 16 * 1024)
    assert (s.retry_base, s.retry_cap, s.default_timeout) == (1.0, 300.0, 3600.0)
    assert (s.heartbeat_interval, s.heartbeat_grace) == (10.0, 3.0)
    assert s.silence_limit == 30.0
    assert (s.runner_name, s.pod_name, s.node_name, s.log_level) == ("", "", "", "info")
    assert s.to_env() == {}


def test_a_given_mapping_replaces_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEDDLE_GATEWAY_PORT", "9999")
    monkeypatch.setenv("HEDDLE_STORAGE", "bogus")
    assert Settings.from_env({}).gateway_port == 8080
    assert Settings.from_env({"HEDDLE_GATEWAY_PORT": "1234"}).gateway_port == 1234


@pytest.mark.parametrize(
    ("var", "raw", "attr", "value"),
    [
        (
            "HEDDLE_NATS_URL",
            "nats://a:4222,nats://b:4222",
            "nats_url",
            "nats://a:4222,nats://b:4222",
        ),
        ("HEDDLE_STORAGE", "memory", "storage", "memory"),
        ("HEDDLE_REPLICAS", "3", "replicas", 3),
        ("HEDDLE_GATEWAY_HOST", "0.0.0.0", "gateway_host", "0.0.0.0"),
        ("HEDDLE_GATEWAY_PORT", "9090", "gateway_port", 9090),
        ("HEDDLE_MAX_STEPS", "50000", "max_steps", 50_000),
        ("HEDDLE_HEARTBEAT_INTERVAL", "0.25", "heartbeat_interval", 0.25),
        ("HEDDLE_RETRY_BASE", "2", "retry_base", 2.0),
        ("HEDDLE_RETRY_CAP", "60", "retry_cap", 60.0),
        ("HEDDLE_REGISTRY_TTL", "1", "registry_ttl", 1.0),
        ("HEDDLE_DEFAULT_TIMEOUT", "1e3", "default_timeout", 1000.0),
        ("HEDDLE_RUNNER_NAME", "runner-7", "runner_name", "runner-7"),
        ("POD_NAME", "heddle-runner-abc", "pod_name", "heddle-runner-abc"),
        ("NODE_NAME", "node-1", "node_name", "node-1"),
        ("HEDDLE_LOG_LEVEL", "debug", "log_level", "debug"),
        ("HEDDLE_EVENT_LOOP", "asyncio", "event_loop", "asyncio"),
    ],
)
def test_each_variable_overrides_its_default(var: str, raw: str, attr: str, value: object) -> None:
    s = Settings.from_env({var: raw, "UNRELATED": "x"})
    assert getattr(s, attr) == value
    assert type(getattr(s, attr)) is type(value)
    assert env_name(attr) == var
    others = {f.name for f in fields(Settings)} - {attr}
    assert all(getattr(s, name) == getattr(Settings(), name) for name in others)


def test_empty_values_mean_the_default() -> None:
    assert Settings.from_env({"HEDDLE_GATEWAY_PORT": "", "HEDDLE_STORAGE": ""}) == Settings()


def test_keyword_overrides_beat_the_mapping() -> None:
    s = Settings.from_env({"HEDDLE_GATEWAY_PORT": "9090"}, gateway_port=0, retry_base=0.01)
    assert (s.gateway_port, s.retry_base) == (0, 0.01)


def test_to_env_round_trips() -> None:
    s = Settings.from_env(
        {
            "HEDDLE_STORAGE": "memory",
            "HEDDLE_REPLICAS": "3",
            "HEDDLE_HEARTBEAT_INTERVAL": "0.5",
            "POD_NAME": "p",
        }
    )
    assert s.to_env() == {
        "HEDDLE_STORAGE": "memory",
        "HEDDLE_REPLICAS": "3",
        "HEDDLE_HEARTBEAT_INTERVAL": "0.5",
        "POD_NAME": "p",
    }
    assert Settings.from_env(s.to_env()) == s


# ---- every problem, in one error ----------------------------------------------------------


def problems_of(env: dict[str, str]) -> list[str]:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    assert str(info.value) == "invalid settings: " + "; ".join(info.value.problems)
    return info.value.problems


@pytest.mark.parametrize(
    ("var", "raw", "words"),
    [
        ("HEDDLE_REPLICAS", "three", ["HEDDLE_REPLICAS", "'three'", "int"]),
        ("HEDDLE_GATEWAY_PORT", "80.5", ["HEDDLE_GATEWAY_PORT", "'80.5'", "int"]),
        ("HEDDLE_MAX_STEPS", "10k", ["HEDDLE_MAX_STEPS", "'10k'"]),
        ("HEDDLE_RETRY_CAP", "5m", ["HEDDLE_RETRY_CAP", "'5m'", "float"]),
        ("HEDDLE_HEARTBEAT_INTERVAL", "fast", ["HEDDLE_HEARTBEAT_INTERVAL", "'fast'"]),
        ("HEDDLE_STORAGE", "disk", ["HEDDLE_STORAGE", "file or memory", "'disk'"]),
        ("HEDDLE_RETRY_BASE", "0", ["HEDDLE_RETRY_BASE", "positive"]),
        ("HEDDLE_KILL_GRACE", "-1", ["HEDDLE_KILL_GRACE", "positive"]),
        ("HEDDLE_WATCHDOG_SCAN", "0", ["HEDDLE_WATCHDOG_SCAN", "positive"]),
        ("HEDDLE_DEFAULT_TIMEOUT", "-0.5", ["HEDDLE_DEFAULT_TIMEOUT", "positive"]),
        ("HEDDLE_REGISTRY_TTL", "0.5", ["HEDDLE_REGISTRY_TTL", "at least 1"]),
        ("HEDDLE_EVENT_LOOP", "trio", ["HEDDLE_EVENT_LOOP", "uvloop or asyncio", "'trio'"]),
        ("HEDDLE_STORE_CHECK_INTERVAL", "0", ["HEDDLE_STORE_CHECK_INTERVAL", "positive"]),
        ("HEDDLE_STORE_RESERVE_BYTES", "-1", ["HEDDLE_STORE_RESERVE_BYTES", "0 or more"]),
        ("HEDDLE_NATS_GOMAXPROCS", "-1", ["HEDDLE_NATS_GOMAXPROCS", "0 (a quarter) or more"]),
        # The logs' default limit (1 GiB) is reserved in the store: it must fit, with the reserve.
        ("HEDDLE_STORE_MAX_BYTES", "1073741824", ["HEDDLE_LOG_MAX_BYTES", "below"]),
    ],
)
def test_each_bad_value_is_named(var: str, raw: str, words: list[str]) -> None:
    [problem] = problems_of({var: raw})
    for word in words:
        assert word in problem


@pytest.mark.parametrize("raw", ["nan", "NaN"])
def test_nan_is_not_a_positive_duration(raw: str) -> None:
    [problem] = problems_of({"HEDDLE_HEARTBEAT_INTERVAL": raw})
    assert "HEDDLE_HEARTBEAT_INTERVAL" in problem


def test_every_bad_number_is_listed() -> None:
    problems = problems_of(
        {
            "HEDDLE_REPLICAS": "x",
            "HEDDLE_GATEWAY_PORT": "y",
            "HEDDLE_RETRY_CAP": "z",
            "HEDDLE_LOG_LEVEL": "debug",
        }
    )
    assert [p.split("=")[0] for p in problems] == [
        "HEDDLE_REPLICAS",
        "HEDDLE_GATEWAY_PORT",
        "HEDDLE_RETRY_CAP",
    ]


def test_every_range_problem_is_listed() -> None:
    problems = problems_of(
        {
            "HEDDLE_STORAGE": "s3",
            "HEDDLE_RETRY_BASE": "0",
            "HEDDLE_RETRY_CAP": "-3",
            "HEDDLE_REGISTRY_TTL": "0",
        }
    )
    assert len(problems) == 4
    for var in ("HEDDLE_STORAGE", "HEDDLE_RETRY_BASE", "HEDDLE_RETRY_CAP", "HEDDLE_REGISTRY_TTL"):
        assert any(var in p for p in problems), (var, problems)


def test_a_store_limit_with_room_for_the_logs_and_the_reserve_is_taken() -> None:
    env = {
        "HEDDLE_STORE_MAX_BYTES": str(64 * 1024**2),
        "HEDDLE_LOG_MAX_BYTES": str(32 * 1024**2),
        "HEDDLE_STORE_RESERVE_BYTES": str(16 * 1024**2),
    }
    assert Settings.from_env(env).store_max_bytes == 64 * 1024**2
    [problem] = problems_of({**env, "HEDDLE_STORE_RESERVE_BYTES": str(32 * 1024**2)})
    assert "HEDDLE_STORE_MAX_BYTES" in problem


def test_bad_numbers_and_a_bad_storage_are_listed_together() -> None:
    problems = problems_of(
        {
            "HEDDLE_STORAGE": "disk",
            "HEDDLE_REPLICAS": "two",
            "HEDDLE_GATEWAY_PORT": "http",
            "HEDDLE_RETRY_BASE": "0",
        }
    )
    for var in ("HEDDLE_STORAGE", "HEDDLE_REPLICAS", "HEDDLE_GATEWAY_PORT", "HEDDLE_RETRY_BASE"):
        assert any(var in p for p in problems), (var, problems)


def test_the_event_loop_setting_picks_the_loop_each_service_runs_on() -> None:

    import uvloop
    from heddle.shared.runtime.service import loop_factory

    assert loop_factory(Settings.from_env({"HEDDLE_EVENT_LOOP": "asyncio"})) is None
    factory = loop_factory(Settings())
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
