"""The `heddle` client commands as subprocesses against a real stack: output, `--json`
output and exit codes (0 done, 1 failed run, 2 usage, 3 cancelled, 4 refused or
unreachable), and the completion scripts as bash reads them. The parts without I/O (file
checks, views): tests/unit/cli/test_cli.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from heddle.services.cli import render
from heddle.services.local.embedded_nats import free_port

from tests.support.cli import env_of, heddle
from tests.support.stack import REPO, StackFactory
from tests.support.workflows import DEMO_YAML, FAILING

BAD_YAML = """\
steps:
  - id: a
    command: echo one
  - id: a
    command: ""
    dependsOn: [nope]
"""
TICKS = "for i in 1 2 3; do echo tick $i; sleep 0.2; done"
ETL_YAML = """\
name: etl
schedule: "0 6 * * *"
steps:
  - {id: extract, command: echo extract}
  - {id: load, command: echo load, dependsOn: [extract]}
"""


async def ok_json(*args: str, env: dict[str, str]) -> Any:
    rc, out, err = await heddle(*args, "--json", env=env)
    assert rc == 0, (args, err)
    return json.loads(out)


# ---- against a stack -------------------------------------------------------------------------


async def test_submit_watch_logs_and_runs(stack: StackFactory, tmp_path: Path) -> None:
    s = await stack(runners=2)
    env = env_of(s)

    # A file with problems: exit 2, every problem as `path: message`, nothing sent.
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_YAML)
    rc, out, err = await heddle("submit", str(bad), env=env)
    assert (rc, out) == (2, "")
    assert "steps[1].id: duplicate step id 'a' (first at steps[0])" in err
    assert "steps[1].command: command is empty" in err
    assert "steps[1].dependsOn[0]: unknown step 'nope'" in err
    assert (await ok_json("runs", env=env))["runs"] == []

    # A succeeding run, waited for: the run id first, then plain lines, exit 0.
    demo = tmp_path / "demo.yaml"
    demo.write_text(DEMO_YAML)
    rc, out, err = await heddle("submit", str(demo), "--run-id", "demo-1", "--wait", env=env)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "demo-1" and "run demo-1 started" in err
    assert any(line.startswith("step D succeeded") for line in lines)
    assert lines[-1].startswith("run demo-1 succeeded in ")

    # A failing run from standard input, waited for as JSON lines: exit 1.
    rc, out, err = await heddle(
        "submit", "-", "--wait", "--json", env=env, stdin=json.dumps(FAILING)
    )
    assert rc == 1, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert docs[0]["status"] == "running" and docs[0]["created"] is True
    failed = docs[-1]
    assert failed["status"] == "failed"
    states = {st["id"]: st["status"] for st in failed["steps"]}
    assert states == {"flaky": "failed", "after": "skipped"}
    run_id = failed["runId"]

    # status: text and JSON.
    rc, out, err = await heddle("status", run_id, env=env)
    assert rc == 0, err
    assert out.startswith(f"run {run_id}: failed")
    assert any(line.split()[:3] == ["flaky", "failed", "2"] for line in out.splitlines())
    assert (await ok_json("status", run_id, env=env))["counts"] == {"failed": 1, "skipped": 1}
    # watch of a finished run: one look, its exit code.
    rc, out, _ = await heddle("watch", run_id, env=env)
    assert rc == 1 and out.splitlines()[-1].startswith(f"run {run_id} failed")

    # logs: all attempts, one attempt, JSON.
    rc, out, err = await heddle("logs", run_id, "flaky", env=env)
    assert rc == 0, err
    assert "try 1" in out and "try 2" in out and "[heddle] started on runner" in out
    rc, out, _ = await heddle("logs", run_id, "flaky", "--attempt", "2", env=env)
    assert rc == 0 and "try 2" in out and "try 1" not in out
    rc, out, err = await heddle("logs", run_id, "flaky", "--attempt", "9", env=env)
    assert (rc, out) == (2, "") and "has 2 attempt(s): no attempt 9" in err, err
    rc, _, err = await heddle("logs", run_id, "flaky", "--attempt", "0", env=env)
    assert rc == 2 and "attempts are numbered from 1" in err
    doc = await ok_json("logs", "demo-1", "A", env=env)
    assert "hello" in [line["text"] for line in doc["lines"] if line["stream"] == "stdout"]

    # logs -f follows a running step to its end.
    rc, out, err = await heddle(
        "submit",
        "-",
        "--run-id",
        "ticks",
        env=env,
        stdin=json.dumps({"steps": [{"id": "T", "command": TICKS}]}),
    )
    assert (rc, out) == (0, "ticks\n"), err
    rc, out, err = await heddle("logs", "ticks", "T", "-f", env=env)
    assert rc == 0, err
    assert [line for line in out.splitlines() if line.startswith("tick")] == [
        "tick 1",
        "tick 2",
        "tick 3",
    ]

    # runs: newest first, filtered by status; runners.
    listed = await ok_json("runs", "--limit", "10", env=env)
    assert {r["runId"] for r in listed["runs"]} == {"demo-1", run_id, "ticks"}
    only_failed = await ok_json("runs", "--status", "failed", env=env)
    assert [r["runId"] for r in only_failed["runs"]] == [run_id]
    rc, out, _ = await heddle("runs", env=env)
    assert rc == 0 and out.splitlines()[0].split()[:2] == ["RUN", "STATUS"]
    pool = await ok_json("runners", env=env)
    assert pool["total"] == 2
    rc, out, _ = await heddle("runners", env=env)
    assert rc == 0 and out.startswith("2 runners")


async def test_cancel_workflows_and_refusals(stack: StackFactory, tmp_path: Path) -> None:
    s = await stack(runners=1)
    env = env_of(s)

    # A cancelled run: watch exits 3; cancelling a finished run is refused (409): 4.
    long = json.dumps({"steps": [{"id": "S", "command": "sleep 30"}]})
    rc, out, err = await heddle("submit", "-", "--run-id", "long", env=env, stdin=long)
    assert rc == 0, err
    await s.wait_step("long", "S", {"running"})
    watching = asyncio.create_task(heddle("watch", "long", env=env))
    rc, out, err = await heddle("cancel", "long", env=env)
    assert (rc, out) == (0, "run long cancelling\n"), err
    rc, out, err = await watching
    assert rc == 3, err
    assert out.splitlines()[-1].startswith("run long cancelled")
    assert (await ok_json("cancel", "long", env=env))["status"] == "cancelled"
    rc, _, err = await heddle(
        "submit",
        "-",
        "--run-id",
        "quick",
        "--wait",
        env=env,
        stdin=(json.dumps({"steps": [{"id": "q", "command": "true"}]})),
    )
    assert rc == 0, err
    rc, _, err = await heddle("cancel", "quick", env=env)
    assert rc == 4 and "409" in err

    # register, workflows, pause, resume, run --wait, runs --workflow.
    etl = tmp_path / "etl.yaml"
    etl.write_text(ETL_YAML)
    rc, out, err = await heddle("register", str(etl), env=env)
    assert (rc, out) == (0, "workflow etl version 1 registered\n"), err
    assert (await ok_json("register", str(etl), env=env)) == {
        "name": "etl",
        "namespace": "default",
        "version": 1,
        "created": False,
    }
    rc, out, _ = await heddle("workflows", env=env)
    assert rc == 0 and out.splitlines()[1].split()[:3] == ["etl", "1", "2"]
    rc, out, _ = await heddle("pause", "etl", env=env)
    assert (rc, out) == (0, "workflow etl paused\n")
    assert (await ok_json("workflows", env=env))["workflows"][0]["paused"] is True
    assert (await ok_json("resume", "etl", env=env))["paused"] is False
    rc, out, err = await heddle("run", "etl", "--wait", env=env)
    assert rc == 0, err
    triggered = out.splitlines()[0]
    history = await ok_json("runs", "--workflow", "etl", env=env)
    assert [r["runId"] for r in history["runs"]] == [triggered]
    assert history["runs"][0]["status"] == "succeeded"
    unnamed = tmp_path / "unnamed.yaml"
    unnamed.write_text("steps: [{id: a, command: 'true'}]\n")
    rc, _, err = await heddle("register", str(unnamed), env=env)
    assert rc == 2 and "name: missing required field" in err

    # Refusals and where to connect: all exit 4, with the gateway's word.
    rc, _, err = await heddle("status", "nosuch", env=env)
    assert rc == 4 and "404" in err
    rc, _, err = await heddle("runs", env=env_of(s, token="hdl_" + "x" * 43))
    assert rc == 4 and "401" in err
    rc, _, err = await heddle("run", "nope", env=env)
    assert rc == 4 and "404" in err
    rc, _, err = await heddle("runs", env={"HEDDLE_URL": f"http://127.0.0.1:{free_port()}"})
    assert rc == 4 and "did not answer" in err
    # Options before or after the command; a token from a file.
    token_file = tmp_path / "token"
    token_file.write_text(s.admin_token + "\n")
    rc, out, err = await heddle("--url", s.base, "--token-file", str(token_file), "workflows")
    assert rc == 0 and "etl" in out, err
    rc, out, err = await heddle("workflows", "--url", s.base, "--token", s.admin_token)
    assert rc == 0 and "etl" in out, err
    rc, out, err = await heddle(
        "runners", env={"HEDDLE_URL": s.base, "HEDDLE_TOKEN_FILE": str(token_file)}
    )
    assert rc == 0 and out.startswith("1 runners"), err


# ---- completion --------------------------------------------------------------------------


def test_views_and_completion() -> None:
    assert render.duration(75) == "1m15s" and render.duration(3 * 3600 + 60) == "3h01m"
    assert render.counts_text({"failed": 1, "succeeded": 2}) == "succeeded=2 failed=1"
    assert render.table(("A", "LONG"), [("xyz", None)]) == "A    LONG\nxyz  -"
    for shell in ("bash", "zsh"):
        script = subprocess.run(
            [sys.executable, "-m", "heddle.services.cli", "completion", shell],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "complete -o default -F _heddle heddle" in script
        assert "submit) COMPREPLY=($(compgen -f -W" in script and "--wait" in script
    check = subprocess.run(["bash", "-n"], input=script, text=True, check=False)
    assert check.returncode == 0


def requests_to(metrics: str, route: str) -> float:
    """GET requests the gateway counted for ``route`` (its Prometheus text)."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("heddle_http_requests_total{") and f'route="{route}"' in line:
            if 'method="GET"' in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


async def test_wait_is_told_by_the_run_events_instead_of_polling(stack: StackFactory) -> None:
    s = await stack(runners=2)
    env = env_of(s)
    flow = {"steps": [{"id": "a", "command": "sleep 1.5"}, {"id": "b", "command": "sleep 1.5"}]}
    flow["steps"][1]["dependsOn"] = ["a"]
    rc, out, err = await heddle("submit", "-", "--wait", env=env, stdin=json.dumps(flow))
    assert rc == 0, err
    assert "succeeded" in out.splitlines()[-1], out
    _, metrics = await s.request("GET", "/metrics")
    # One read to start and one at the end; a poll every 0.5 s would have read six or more.
    assert requests_to(metrics, "/api/runs/{run}") <= 3, metrics
    assert requests_to(metrics, "/api/runs/{run}/events") == 1


async def test_a_bad_url_token_or_data_dir_is_a_message_and_exit_2(tmp_path: Path) -> None:
    """What a person mistypes gets one line naming it, never a traceback."""
    unreadable = tmp_path / "token"
    unreadable.write_bytes(b"tok\xff\n")
    cases = [
        (["--url", "notaurl", "runs"], "'notaurl' is not an http:// or https:// URL"),
        (["--url", "http://[::1", "runs"], "is not a URL: Invalid IPv6 URL"),
        (["--url", "http://127.0.0.1:99999", "runs"], "Port out of range"),
        (["--token", "tøken", "runs"], "--token: a token is visible ASCII"),
        (["--token", "a\nb", "runs"], "--token: a token is visible ASCII"),
        (["--token-file", str(unreadable), "runs"], f"the token file {unreadable} is not UTF-8"),
        (["up", "--data-dir", str(unreadable / "x")], "as the data dir: Not a directory"),
    ]
    for args, words in cases:
        rc, out, err = await heddle("--url", "http://127.0.0.1:9", *args)
        assert (rc, out) == (2, ""), (args, rc, out, err)
        assert words in err and "Traceback" not in err, (args, err)
