"""shared/runtime/metrics.py's registries, without I/O: the Grafana dashboard (deploy/grafana) asks
only for metrics some service exposes. Scraped from a real stack:
tests/integration/test_metrics.py."""

from __future__ import annotations

import json
import re

from heddle.shared.runtime.metrics import registry_for

from tests.support.stack import REPO


def test_the_grafana_dashboard_uses_only_metrics_that_exist() -> None:
    dashboard = json.loads((REPO / "deploy" / "grafana" / "heddle.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bheddle_[a-z_]+", e)}
    exposed = {
        sample
        for service in ("gateway", "orchestrator", "dispatcher", "runner")
        for metric in registry_for(service).collect()
        for sample in _names(metric.name, metric.type)
    }
    assert used and used <= exposed, used - exposed


def _names(name: str, kind: str) -> set[str]:
    if kind == "counter":
        return {name + "_total"}
    if kind == "histogram":
        return {name + s for s in ("_bucket", "_sum", "_count")}
    return {name}
