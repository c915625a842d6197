"""The chart's Grafana dashboards: every query parses as PromQL and selects only metrics the components
export, by labels they have; the ConfigMap that ships them is off by default and carries every file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import promql_parser
import pytest

from kai.metrics import BinderMetrics, QueueMetrics, Registry, SchedulerMetrics
from support.chart import render_chart

CHART = Path(__file__).resolve().parents[3] / "deploy" / "chart" / "kai-scheduler"
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
#: Labels Prometheus adds to every sample it scrapes from a Service (the Prometheus operator's).
SCRAPE_LABELS = frozenset({"namespace", "pod", "job", "instance", "service", "endpoint", "container"})
#: Grafana's interval variables, which are no PromQL: a duration stands in for them when parsing.
INTERVAL = re.compile(r"\$__(rate_interval|interval|range)")
LABEL_VALUES = re.compile(r"^label_values\((.+),\s*(\w+)\)$")


def exported() -> dict[str, frozenset[str]]:
    """Every sample name the scheduler, the binder and the queue controller export, with its labels."""
    registry = Registry()
    SchedulerMetrics(registry)
    BinderMetrics(registry)
    QueueMetrics(registry)
    return {sample: frozenset(f.labels) | ({"le"} if sample.endswith("_bucket") else set())
            for f in registry.families for sample in f.samples()}


def problems(expr: str, metrics: dict[str, frozenset[str]]) -> list[str]:
    """What is wrong with one query: a syntax error, an unknown metric, a label the metric does not have."""
    try:
        ast = promql_parser.parse(INTERVAL.sub("5m", expr))
    except ValueError as exc:
        return [f"not PromQL: {exc}"]
    found: list[str] = []

    def labels_under(node) -> frozenset[str]:
        names: set[str] = set(SCRAPE_LABELS)

        def add(n) -> None:  # walk() stops at a callback returning False
            if isinstance(n, promql_parser.VectorSelector):
                names.update(metrics.get(n.name, ()))

        promql_parser.walk(node, add)
        return frozenset(names)

    def visit(node) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name not in metrics:
                found.append(f"{node.name} is not exported")
            else:
                found.extend(f"{node.name} has no label {m.name}" for m in node.matchers.matchers
                             if m.name not in metrics[node.name] | SCRAPE_LABELS)
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            if node.modifier.type == promql_parser.AggModifierType.By:
                found.extend(f"{node.op} by {label}: no such label" for label in node.modifier.labels
                             if label not in labels_under(node.expr))

    promql_parser.walk(ast, visit)
    return found


def panels(items):
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", ()))


def queries(dashboard: dict):
    """(where, PromQL) of every panel target and of every variable's ``label_values`` query."""
    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", ()):
            yield f"{panel['title']} {target['refId']}", target["expr"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            selector = LABEL_VALUES.match(var["query"]["query"])
            assert selector, f"variable {var['name']}: not label_values(metric, label)"
            yield f"variable {var['name']}", selector.group(1)


@pytest.fixture(scope="module")
def metrics():
    return exported()


def test_the_checker_finds_unknown_metrics_labels_and_bad_syntax(metrics):
    assert problems('sum by (action) (rate(kai_podgroups_scheduled_by_action_total{pod=~"$pod"}[$__rate_interval]))',
                    metrics) == []
    assert problems("kai_podgroups_scheduled_by_action", metrics) == [
        "kai_podgroups_scheduled_by_action is not exported"]  # a counter's samples end in _total
    assert problems('kai_queue_info{queue="a"}', metrics) == ["kai_queue_info has no label queue"]
    assert problems("sum by (plugin) (kai_action_scheduling_latency_seconds)", metrics) == [
        "sum by plugin: no such label"]
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
