"""The chart's alert on a filling store (metrics.prometheusRule, docs/storage.md): none by
default; when enabled, a PrometheusRule as the Prometheus Operator's CRD takes it, alerting
on the orchestrators' heddle_store_* gauges at the percentage given."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import jsonschema
import pytest

from tests.support.chart_render import NAMESPACE, Manifest, render

# The fields of monitoring.coreos.com/v1 PrometheusRule the chart writes, as its CRD defines
# them; anything else is refused, as strict validation would.
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "expr": {"type": "string"},
                                        "for": {"type": "string"},
                                        "labels": _STRINGS,
                                        "annotations": _STRINGS,
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def rules_of(manifest: Manifest) -> list[dict[str, Any]]:
    return list(manifest.of_kind("PrometheusRule").values())


def test_no_rule_by_default(default: Manifest) -> None:
    assert rules_of(default) == []


@pytest.mark.parametrize(("percent", "threshold"), [(80, "80"), (92.5, "92.5")])
def test_the_rule_alerts_at_the_percentage_given(
    chart: helm.Chart, percent: float, threshold: str
) -> None:
    values = {"prometheusRule": {"enabled": True, "storeUsedPercent": percent, "for": "5m"}}
    values["prometheusRule"]["labels"] = {"release": "prometheus"}
    [rule] = rules_of(render(chart, {"metrics": values}))
    jsonschema.validate(rule, PROMETHEUS_RULE)
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    [group] = rule["spec"]["groups"]
    [alert] = group["rules"]
    assert alert["alert"] == "HeddleStoreNearlyFull"
    assert alert["for"] == "5m"
    ns = f'namespace="{NAMESPACE}"'
    assert alert["expr"] == (
        f"max(heddle_store_used_bytes{{{ns}}}) / max(heddle_store_limit_bytes{{{ns}}} > 0)"
        f" * 100 > {threshold}"
    )
    assert threshold in alert["annotations"]["summary"]


def test_a_threshold_past_100_percent_is_refused(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(chart, {"metrics": {"prometheusRule": {"enabled": True, "storeUsedPercent": 150}}})
