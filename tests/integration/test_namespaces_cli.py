"""`heddle` in namespaces against a real stack: `-n`/`--namespace` and `HEDDLE_NAMESPACE` choose
where a run is submitted and what is read; the same run id lives in two namespaces apart; a
token of one namespace reads nothing of another; `heddle token create --grant` makes such a
token. The parts without I/O: tests/unit/cli/test_cli_namespaces.py."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import env_of, heddle
from tests.support.namespaces import stack_of_teams
from tests.support.stack import StackFactory


def workflow_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / f"{text}.json"
    path.write_text(json.dumps({"steps": [{"id": "say", "command": f"echo {text}"}]}))
    return path


async def test_the_command_line_works_in_the_namespace_it_is_given(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack_of_teams(stack)
    admin = env_of(s)
    for ns, text in (("team-a", "from-a"), ("team-b", "from-b")):
        path = str(workflow_file(tmp_path, text))
        argv = ("submit", path, "--run-id", "nightly-1", "--wait", "-n", ns)
        rc, out, err = await heddle(*argv, env=admin)
        assert rc == 0 and out.splitlines()[0] == "nightly-1", err
    rc, out, err = await heddle(
        "token", "create", "--name", "b-ci", "--grant", "team-b=operator", env=admin
    )
    assert rc == 0, err
    b_only = env_of(s, out.strip())
    # team-b's own token: its namespace is the one it has, without being told.
    rc, out, err = await heddle("logs", "nightly-1", "say", env=b_only)
    assert rc == 0 and "from-b" in out.splitlines() and "from-a" not in out, err
    rc, out, _ = await heddle("runs", "--json", env=b_only)
    assert [(r["runId"], r["namespace"]) for r in json.loads(out)["runs"]] == [
        ("nightly-1", "team-b")
    ]
    # team-a's run through the environment's namespace, as admin; refused to team-b's token.
    rc, out, err = await heddle(
        "logs", "nightly-1", "say", env={**admin, "HEDDLE_NAMESPACE": "team-a"}
    )
    assert rc == 0 and "from-a" in out.splitlines() and "from-b" not in out, err
    rc, _, err = await heddle("status", "nightly-1", "-n", "team-a", env=b_only)
    assert rc == 4 and "404" in err and "from-a" not in err
    rc, _, err = await heddle("runs", "-n", "team b", env=b_only)
    assert rc == 2 and "not a namespace's name" in err
