"""What deploy/ ships for Prometheus and Grafana, read for the tests: the alert rules, their
``promtool`` unit tests, the dashboard, and the metric names their expressions read
(tests/test_alerts.py checks the rules; tests/test_up.py checks the names against what the
running processes export)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULES_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "hiwallet.json"
# Made by Prometheus's scrape, not by the processes.
SCRAPE_METRICS = frozenset({"up"})

# PromQL's words that look like a metric name: aggregations' and joins' keywords, operators.
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool"}
)
_NAME = re.compile(r"(?<![\w.:$])[a-zA-Z_:][a-zA-Z0-9_:]*")


def promtool() -> str | None:
    """The Makefile's promtool (.venv/bin, `make promtool`), else one on the PATH."""
    local = ROOT / ".venv" / "bin" / "promtool"
    return str(local) if local.exists() else shutil.which("promtool")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (not its functions, labels or keywords)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, templates)
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges
    expr = re.sub(r"\boffset\s+\S+", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for match in _NAME.finditer(expr):
        if expr[match.end() :].lstrip().startswith("("):  # a function call
            continue
        if match.group() not in _KEYWORDS:
            names.add(match.group())
    return names


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    """Every query of the dashboard's panels (rows' nested panels included)."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            exprs += [target["expr"] for target in inner.get("targets", [])]
    return exprs


def used_metric_names() -> set[str]:
    """Every metric name the alert rules and the dashboard read, but the scrape's own."""
    exprs = [rule["expr"] for rule in rules()] + dashboard_exprs()
    return set().union(*(metric_names(expr) for expr in exprs)) - SCRAPE_METRICS


# The names a family of each type gives its samples (prometheus_client's parser names a
# counter's family without its _total).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}


def exported_names(exposition: str) -> set[str]:
    """The sample names a /metrics answer declares, those of families with no sample yet
    (a labelled metric nothing has counted) included."""
    names = set()
    for family in text_string_to_metric_families(exposition):
        names |= {family.name + suffix for suffix in _SUFFIXES[family.type]}
        names |= {sample.name for sample in family.samples}
    return names
