"""Reading processes from /proc: trees, process groups, CPU and memory. Used by the
benchmark harness and the fault tests to see what a service and its commands left running."""

from __future__ import annotations

import os
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One process's counters at one moment: peak and current RSS (MB), CPU seconds, and
    the times its threads went to sleep (each a wake-up later)."""

    peak_rss_mb: float
    rss_mb: float
    cpu_s: float
    sleeps: int = 0


def proc_sample(pid: int) -> ProcSample | None:
    """VmHWM and VmRSS from /proc/<pid>/status, utime + stime from /proc/<pid>/stat (the
    process itself, not the commands it started and reaped)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        own, _ = cpu_seconds(pid)
        slept = sleeps(pid)
    except OSError:
        return None
    kb = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            kb[key] = int(value.split()[0])
    return ProcSample(
        peak_rss_mb=kb.get("VmHWM", 0) / 1024,
        rss_mb=kb.get("VmRSS", 0) / 1024,
        cpu_s=own,
        sleeps=slept,
    )


def sleeps(pid: int) -> int:
    """How often the threads of ``pid`` gave up their CPU to wait (voluntary context
    switches, summed over /proc/<pid>/task/*/status): each is a wake-up to come, which on
    a virtual machine costs an interrupt between CPUs. OSError if it is gone."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                total += voluntary_switches(f.read())
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return total


def voluntary_switches(status: str) -> int:
    """``voluntary_ctxt_switches`` from the text of a /proc status file (0 if absent)."""
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key == "voluntary_ctxt_switches":
            return int(value)
    return 0


def cpu_seconds(pid: int) -> tuple[float, float]:
    """A process's own CPU seconds (utime + stime) and those of the children it reaped
    (cutime + cstime), from /proc/<pid>/stat; OSError if it is gone."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields after the command name start at field 3 (state): utime is 14, cstime 17.
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime) / CLK_TCK, (cutime + cstime) / CLK_TCK


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children of children included), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def launcher_of(runner: int) -> int | None:
    """The pid of a runner's step launcher (a child that runs launcher_main.py), if any."""
    for pid in descendants(runner):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"launcher_main.py" in f.read():
                    return pid
        except OSError:
            continue
    return None


def process_exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is ``pgid`` (read from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry))
    return out
