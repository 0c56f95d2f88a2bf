"""What the benchmark reads of a process from /proc (bench/procfs.py): its sleeps, which
`make bench` reports as wake-ups per step."""

from __future__ import annotations

import os
import threading
import time

from bench.procfs import proc_sample, sleeps, voluntary_switches

STATUS = """Name:\tpython
State:\tS (sleeping)
voluntary_ctxt_switches:\t1234
nonvoluntary_ctxt_switches:\t56
"""


def test_the_voluntary_switches_are_read_from_a_status_file() -> None:
    assert voluntary_switches(STATUS) == 1234
    assert voluntary_switches("Name:\tpython\n") == 0


def test_the_sleeps_of_every_live_thread_of_the_process_are_counted() -> None:
    slept, done = threading.Event(), threading.Event()

    def sleeper() -> None:
        for _ in range(20):
            time.sleep(0.001)
        slept.set()
        done.wait()

    worker = threading.Thread(target=sleeper)
    before = sleeps(os.getpid())
    worker.start()
    try:
        slept.wait()
        # The thread's twenty sleeps (the main thread's wait for it adds at most a few).
        assert sleeps(os.getpid()) - before >= 20
    finally:
        done.set()
        worker.join()


def test_a_sample_carries_the_sleeps() -> None:
    sample = proc_sample(os.getpid())
    assert sample is not None and sample.sleeps >= 1
