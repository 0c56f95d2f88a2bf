"""The file a step writes its outputs to (services/runner_agent/outputs_file.py)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import tempfile
import termios
from pathlib import Path

import pytest
from heddle.services.runner_agent import outputs_file
from heddle.services.runner_agent.outputs_file import OutputsFile

from tests.stack import until


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


# ---- bounded while written (services/runner_agent/file_watch.py) ----


def queued(watcher: object) -> int:
    """Bytes of events the kernel holds for the watcher: what would wake the event loop."""
    return struct.unpack("i", fcntl.ioctl(watcher.fd, termios.FIONREAD, b"\0" * 4))[0]


async def test_a_watched_file_s_writes_reach_its_callback_from_the_loop(tmp_path: Path) -> None:
    from heddle.services.runner_agent import file_watch

    watcher = file_watch.running()
    assert watcher is not None and file_watch.running() is watcher  # one per loop
    path = tmp_path / "watched"
    path.write_bytes(b"")
    calls: list[str] = []
    seen = asyncio.Event()
    watch = watcher.add(str(path), lambda: (calls.append("k"), seen.set()))
    with path.open("ab") as step:
        step.write(b"k=v\n")
    await asyncio.wait_for(seen.wait(), 30)
    watch.stop()
    read = asyncio.Event()  # another file's watch: told once the loop has read the write
    other = watcher.add(str(tmp_path / "other"), read.set)
    path.write_bytes(b"after")
    await asyncio.wait_for(read.wait(), 30)
    other.stop()
    assert calls == ["k"]  # the stopped watch is told nothing


def test_the_runner_s_loop_uvloop_reads_the_watches_too(tmp_path: Path) -> None:
    uvloop = pytest.importorskip("uvloop")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(test_a_watched_file_s_writes_reach_its_callback_from_the_loop(tmp_path))


async def test_a_watch_on_a_file_never_written_never_wakes_the_loop(tmp_path: Path) -> None:
    """Watches cost no system call once their directory is watched, and a file nobody writes
    queues nothing for the loop; a file renamed within the directory is still seen."""
    from heddle.services.runner_agent import file_watch

    watcher = file_watch.running()
    assert watcher is not None
    quiet, busy = tmp_path / "quiet", tmp_path / "busy"
    quiet.write_bytes(b"")
    busy.write_bytes(b"")
    called: list[str] = []
    first = watcher.add(str(quiet), lambda: called.append("quiet"))
    first.stop()
    first.stop()  # twice: harmless
    assert queued(watcher) == 0 and called == []
    seen = asyncio.Event()
    second = watcher.add(str(busy), lambda: (called.append("busy"), seen.set()))
    moved = tmp_path / "moved"
    busy.rename(moved)
    moved.write_bytes(b"x")
    await asyncio.wait_for(seen.wait(), 30)
    assert called == ["busy"]
    second.stop()


async def test_an_outputs_file_past_its_limit_is_emptied_and_the_attempt_told(
    fresh: None,
) -> None:
    reasons: list[str] = []
    told = asyncio.Event()

    def too_large(reason: str) -> None:
        reasons.append(reason)
        told.set()

    file = OutputsFile(limit=100, too_large=too_large)
    try:
        with open(file.path, "ab") as step:
            step.write(b"k=" + b"x" * 98)  # at the limit: left alone
            step.flush()
            step.write(b"x" * 900)
            step.flush()
            await asyncio.wait_for(told.wait(), 30)
            assert os.fstat(file.fd).st_size == 0  # the memory back, the step still writing
            step.write(b"y" * 1000)  # goes on: cut again, told once
            step.flush()
            await until(lambda: os.fstat(file.fd).st_size == 0, 30, "the file cut again")
        problem = "the outputs file is 1000 bytes; the limit is 100 (HEDDLE_OUTPUTS_MAX_BYTES)"
        assert reasons == [f"bad outputs: {problem}"]
        # Whether or not the step was killed in time, its outputs are refused as too large.
        assert file.take(True, 100) == f"bad outputs: {problem}"
    finally:
        file.close()
    assert file.fd is None and not Path(file.path).exists()


async def test_outputs_within_the_limit_are_read_as_before(fresh: None) -> None:
    file = OutputsFile(limit=100, too_large=lambda reason: pytest.fail(reason))
    Path(file.path).write_text("answer=42\n")
    assert file.take(True, 100) == {"answer": "42"}
    assert not Path(file.path).exists()
