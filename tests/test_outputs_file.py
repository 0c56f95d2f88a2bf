"""The file a step writes its outputs to (services/runner_agent/outputs_file.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from services.runner_agent import outputs_file
from services.runner_agent.outputs_file import OutputsFile


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """No directory made yet in this process."""
    monkeypatch.setattr(outputs_file, "_directory", None)


def test_the_files_are_made_in_memory_where_there_is_a_memory_directory(
    fresh: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(outputs_file, "MEMORY_DIR", str(tmp_path))
    first, second = OutputsFile(), OutputsFile()
    try:
        directory = Path(first.path).parent
        assert directory.parent == tmp_path and directory.name.startswith("heddle-outputs-")
        assert Path(second.path).parent == directory  # one directory per process
        assert first.path != second.path
    finally:
        first.close()
        second.close()
    assert not Path(first.path).exists()


def test_without_a_memory_directory_they_go_to_the_temporary_directory(
    fresh: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(outputs_file, "MEMORY_DIR", str(tmp_path / "none"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    file = OutputsFile()
    try:
        assert Path(file.path).parent.parent == tmp_path / "tmp"
    finally:
        file.close()


def test_what_the_step_wrote_is_read_through_the_descriptor(fresh: None) -> None:
    file = OutputsFile()
    try:
        Path(file.path).write_text("answer=42\n")
        moved = file.path + ".moved"
        os.rename(file.path, moved)  # the path no longer leads to it
        Path(file.path).write_text("answer=forged\n")
        assert file.read(1024) == {"answer": "42"}
        os.unlink(moved)
    finally:
        file.close()
