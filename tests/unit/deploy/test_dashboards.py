"""The chart's Grafana dashboards: every query parses as PromQL and selects only metrics the components
export, by labels they have; the ConfigMap that ships them is off by default and carries every file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.chart import render_chart
from support.dashboards import panels, problems, queries, run_metrics

CHART = Path(__file__).resolve().parents[3] / "deploy" / "chart" / "kai-scheduler"
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))


@pytest.fixture(scope="module")
def metrics():
    return run_metrics()


def test_the_checker_finds_unknown_metrics_labels_and_bad_syntax(metrics):
    assert problems('sum by (action) (rate(kai_podgroups_scheduled_by_action{pod=~"$pod"}[$__rate_interval]))',
                    metrics) == []
    assert problems("kai_podgroups_scheduled_by_action_total", metrics) == [
        "kai_podgroups_scheduled_by_action_total is not exported"]  # KAI's name has no _total
    assert problems('kai_queue_info{queue="a"}', metrics) == ["kai_queue_info has no label queue"]
    assert problems("sum by (plugin) (kai_action_scheduling_latency_milliseconds)", metrics) == [
        "sum by plugin: no such label"]
    assert problems("sum by (code) (rate(apiserver_request_total[5m]))", metrics) == [
        "sum by code: no such label", "apiserver_request_total is not exported"]
    assert problems("sum by (code) (rate(apiserver_request_total[5m]))", metrics, elsewhere=("apiserver_",)) == []
    assert problems("sum(kai_queue_info", metrics)[0].startswith("not PromQL")


def test_there_are_dashboards_for_the_scheduler_the_queues_and_the_binder():
    assert [p.name for p in DASHBOARDS] == ["kai-binder.json", "kai-queues.json", "kai-scheduler.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_of_a_dashboard_selects_exported_metrics_by_their_labels(path, metrics):
    dashboard = json.loads(path.read_text())
    found = list(queries(dashboard))
    assert len(found) > 5
    for where, expr in found:
        assert problems(expr, metrics) == [], f"{path.name}: {where}: {expr}"
    for panel in panels(dashboard["panels"]):
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]


def test_dashboards_have_distinct_uids_and_titles():
    boards = [json.loads(p.read_text()) for p in DASHBOARDS]
    assert len({b["uid"] for b in boards}) == len({b["title"] for b in boards}) == len(boards)
    assert all(b["id"] is None for b in boards)  # Grafana assigns ids on import


def test_the_dashboards_configmap_is_off_by_default_and_carries_every_dashboard():
    assert not [d for d in render_chart(CHART) if d["kind"] == "ConfigMap"]
    docs = render_chart(CHART, namespace="kai", values={"grafanaDashboards": {
        "enabled": True, "namespace": "monitoring", "annotations": {"grafana_folder": "KAI"}}})
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "KAI"}
    assert {name: json.loads(text) for name, text in configmap["data"].items()} == {
        p.name: json.loads(p.read_text()) for p in DASHBOARDS}
    (default,) = [d for d in render_chart(CHART, namespace="kai", values={"grafanaDashboards": {"enabled": True}})
                  if d["kind"] == "ConfigMap"]
    assert default["metadata"]["namespace"] == "kai" and "annotations" not in default["metadata"]
