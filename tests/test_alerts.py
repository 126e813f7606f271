"""The alert rules HiWallet ships (deploy/prometheus/alerts.yml): valid for Prometheus, each one
unit-tested by promtool (deploy/prometheus/alerts_test.yml) with a case where it fires and one
where it stays quiet, and the dashboard (deploy/grafana/hiwallet.json) well formed. That every
metric they read is one the processes export: tests/test_up.py, against the running system.

promtool comes from `make promtool` (a dependency of `make test`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import promql

TIMEOUT_S = 60


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = promql.promtool()
    if tool is None:
        pytest.fail("promtool is missing: `make promtool` installs it")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def test_the_rules_are_valid() -> None:
    done = run_promtool("check", "rules", str(promql.RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(promql.rules())} rules found" in done.stdout


def test_every_rule_passes_its_unit_tests() -> None:
    done = run_promtool("test", "rules", str(promql.RULES_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_expectation_fails_the_unit_tests(tmp_path: Path) -> None:
    """The run above can fail: the same tests, one firing case expected quiet, fail."""
    tests = yaml.safe_load(promql.RULES_TESTS.read_text())
    tests["rule_files"] = [str(promql.RULES)]
    case = next(c for t in tests["tests"] for c in t["alert_rule_test"] if c.get("exp_alerts"))
    case["exp_alerts"] = []
    wrong = tmp_path / "wrong_test.yml"
    wrong.write_text(yaml.safe_dump(tests))
    done = run_promtool("test", "rules", str(wrong))
    assert done.returncode != 0
    assert case["alertname"] in done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts = {rule["alert"] for rule in promql.rules()}
    tests = yaml.safe_load(promql.RULES_TESTS.read_text())
    firing: set[str] = set()
    quiet: set[str] = set()
    for group in tests["tests"]:
        for case in group["alert_rule_test"]:
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert tests["rule_files"] == [promql.RULES.name]
    assert alerts - firing == set(), "alerts never seen firing"
    assert alerts - quiet == set(), "alerts never seen quiet"
    assert (firing | quiet) - alerts == set(), "cases of alerts that do not exist"


def test_every_rule_says_how_bad_and_what_it_is() -> None:
    for rule in promql.rules():
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_the_dashboard_queries_the_alerts_signals() -> None:
    dashboard = json.loads(promql.DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    dashboard_names = set().union(*(promql.metric_names(e) for e in promql.dashboard_exprs()))
    alert_names = set().union(*(promql.metric_names(rule["expr"]) for rule in promql.rules()))
    assert alert_names - dashboard_names == set(), "signals alerted on but not on the dashboard"


def test_metric_names_reads_names_not_functions_labels_or_keywords() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (service, le) ("
        'rate(http_request_duration_seconds_bucket{job=~"$job"}[$__rate_interval]))) > 1e3'
        " and on (job) (up offset 5m == scalar(max(process_start_time_seconds)))"
    )
    assert promql.metric_names(expr) == {
        "http_request_duration_seconds_bucket",
        "up",
        "process_start_time_seconds",
    }
