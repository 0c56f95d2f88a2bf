"""The embedded nats-server's monitoring and profiling ports (bench/messages.py reads
``/connz``, the soak its Go heap): on the listen host, with or without a configuration file
(with one, the bench smoke test's count pass reads them)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from heddle.services.local.embedded_nats import EmbeddedNats, free_port


def test_the_ports_answer_on_the_listen_host_alone(tmp_path: Path) -> None:
    monitor, prof = free_port(), free_port()
    server = EmbeddedNats(
        tmp_path / "store", port=free_port(), monitor_port=monitor, prof_port=prof
    )
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/varz", timeout=5) as resp:
            varz = json.load(resp)
        assert (varz["http_host"], varz["http_port"]) == ("127.0.0.1", monitor)
        heap = f"http://127.0.0.1:{prof}/debug/pprof/heap?debug=1"
        with urllib.request.urlopen(heap, timeout=5) as resp:
            assert b"# HeapAlloc = " in resp.read()
    finally:
        server.stop()
