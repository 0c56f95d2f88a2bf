"""The scripts of docs/client.md, run as they are written against a real stack, so the page
cannot rot: the sync one and the asyncio one each submit a workflow, wait for it, read its
logs and exit 0 once it succeeded."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from tests.support.stack import REPO, StackFactory

PAGE = REPO / "docs" / "client.md"


def script_marked(name: str) -> str:
    """The Python block under ``<!-- tested: NAME -->`` on the page."""
    found = re.search(rf"<!-- tested: {name} -->\n```python\n(.*?)```", PAGE.read_text(), re.S)
    assert found, f"docs/client.md has no script marked {name}"
    return found.group(1)


async def run_script(text: str, folder: Path, env: dict[str, str]) -> tuple[int, str, str]:
    path = folder / "script.py"
    path.write_text(text)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(path),
        cwd=folder,  # no .heddle here: the address and the token come from the environment
        env={"PATH": "/usr/bin:/bin", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_page_s_scripts_run_as_written(stack: StackFactory, tmp_path: Path) -> None:
    s = await stack(runners=2)
    env = {"HEDDLE_URL": s.base, "HEDDLE_TOKEN": s.admin_token}
    rc, out, err = await run_script(script_marked("sync"), tmp_path, env)
    assert rc == 0, err
    lines = out.splitlines()
    assert re.fullmatch(r"run \S+ succeeded", lines[0]), out
    assert lines[1:] == [
        "  build: succeeded (attempt 1, exit 0)",
        "  test: succeeded (attempt 1, exit 0)",
        "  test says: testing",
    ]
    rc, out, err = await run_script(script_marked("async"), tmp_path, env)
    assert rc == 0, err
    assert re.fullmatch(r"run \S+ succeeded: \['hello'\]\n", out), out
