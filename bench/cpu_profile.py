"""Run one Heddle service under cProfile with a CPU-time clock (``time.process_time``), so
the profile shows where a service spends CPU rather than where it waits. The bench starts a
service this way when ``HEDDLE_BENCH_CPROFILE`` names it:

    python -m bench.cpu_profile OUT.prof SERVICE
"""

from __future__ import annotations

import cProfile
import sys
import time


def main() -> int:
    out, service = sys.argv[1], sys.argv[2]
    from heddle.services.cli.main import main as cli_main

    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        return cli_main([service])
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    sys.exit(main())
