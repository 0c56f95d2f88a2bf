"""The last release's code, installed beside this checkout's: a git worktree of its tag and a
virtualenv of its own, whose third-party packages are this checkout's (the same pins), so the
install needs no network and takes seconds."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tests.support.stack import REPO


def git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def last_release() -> str:
    """The newest release this checkout descends from (itself, on a release commit), or the
    one HEDDLE_UPGRADE_FROM names: its tag, or in a clone without tags the newest commit
    whose subject is ``Release <version>`` (docs/upgrading.md, "Releases")."""
    if chosen := os.environ.get("HEDDLE_UPGRADE_FROM"):
        return chosen
    try:
        return git("describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", "HEAD")
    except RuntimeError as exc:
        found = git("log", "-1", "--format=%H", "--grep=^Release [0-9]", "HEAD")
        if not found:
            raise RuntimeError(f"{exc}, and no commit 'Release <version>' either") from exc
        return found


@dataclass
class Release:
    tag: str
    tree: Path
    python: str

    def remove(self) -> None:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(self.tree)],
            capture_output=True,
            check=False,
        )


def install(tag: str, where: Path) -> Release:
    """``tag``'s code in a worktree under ``where``, installed (not editable) into a
    virtualenv there."""
    tree, venv = where / "tree", where / "venv"
    git("worktree", "add", "--detach", str(tree), tag)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # This checkout's packages, after the release's own: aiohttp, nats-py, msgspec ...
    Path(purelib, "heddle-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(tree),
        ],
        check=True,
    )
    return Release(tag, tree, python)
