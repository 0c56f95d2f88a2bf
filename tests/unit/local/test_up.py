"""`heddle up`'s plan (services/local/up.py), without starting anything: the processes it would
start, their names and their metrics ports, and the counts it refuses. `heddle up` itself:
tests/integration/test_up.py."""

from __future__ import annotations

import pytest
from heddle.services.cli.main import main as cli_main
from heddle.services.local.up import plan
from heddle.shared.runtime.settings import Settings


def test_up_plans_several_dispatchers_each_named_as_the_one_dispatcher_user() -> None:
    children = plan(Settings(metrics_port=9100), 2, {}, dispatchers=3)
    dispatchers = [c for c in children if c.argv[-1] == "dispatcher"]
    assert [c.name for c in dispatchers] == ["dispatcher", "dispatcher-1", "dispatcher-2"]
    assert [c.env["HEDDLE_DISPATCHER_NAME"] for c in dispatchers] == [c.name for c in dispatchers]
    # The first keeps its port; the others come after the runners'.
    ports = [c.env["HEDDLE_METRICS_PORT"] for c in dispatchers]
    assert ports == ["9101", "9105", "9106"]
    assert len({c.env["HEDDLE_METRICS_PORT"] for c in children}) == len(children)


def test_up_plans_several_orchestrators_each_named() -> None:
    children = plan(Settings(metrics_port=9100), 2, {}, dispatchers=2, orchestrators=3)
    orchestrators = [c for c in children if c.argv[-1] == "orchestrator"]
    names = ["orchestrator", "orchestrator-1", "orchestrator-2"]
    assert [c.name for c in orchestrators] == names
    assert [c.env["HEDDLE_ORCHESTRATOR_NAME"] for c in orchestrators] == names
    assert [c.env["HEDDLE_METRICS_PORT"] for c in orchestrators] == ["9100", "9106", "9107"]


def test_up_refuses_more_orchestrators_than_partitions(capsys: pytest.CaptureFixture) -> None:
    assert cli_main(["up", "--orchestrators", "13"]) == 2
    assert "more than the 12 partitions" in capsys.readouterr().err
    assert cli_main(["up", "--orchestrators", "0", "--runners", "0"]) == 2
    assert "--runners and --orchestrators must be at least 1" in capsys.readouterr().err


def test_heddle_up_gives_each_process_its_own_metrics_port() -> None:
    children = plan(Settings(metrics_port=9100), 2, {})
    ports = {c.name: c.env.get("HEDDLE_METRICS_PORT") for c in children}
    assert ports == {
        "orchestrator": "9100",
        "dispatcher": "9101",
        "runner-0": "9103",
        "runner-1": "9104",
        "gateway": "9102",
    }
    assert all("HEDDLE_METRICS_PORT" not in c.env for c in plan(Settings(), 2, {}))
