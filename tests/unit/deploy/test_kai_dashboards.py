"""KAI v0.17's own five Grafana dashboards, unchanged, select only series a ``kai-scheduler run`` process
exports, by labels they have, or series of the cluster's own exporters, which a KAI install reads too."""

from __future__ import annotations

import json
from pathlib import Path

import promql_parser
import pytest

from support.dashboards import INTERVAL, problems, queries, run_metrics

#: KAI's ``docs/metrics/grafana`` at d5bc503a (``NOTICE`` there says so).
DASHBOARDS = sorted(Path(__file__).with_name("kai_v017_dashboards").glob("*.json"))
#: The series KAI's dashboards read from other exporters than KAI's components, by name prefix.
ELSEWHERE = {
    "container_": "the kubelet's cAdvisor",
    "kube_": "kube-state-metrics",
    "apiserver_": "the API server",
    "etcd_": "the API server (its etcd client)",
}


@pytest.fixture(scope="module")
def metrics():
    return run_metrics()


def selected(path: Path) -> set[str]:
    """The metric names a dashboard's queries select."""
    names: set[str] = set()
    for _, expr in queries(json.loads(path.read_text())):
        promql_parser.walk(promql_parser.parse(INTERVAL.sub("5m", expr)),
                           lambda n: names.add(n.name) if isinstance(n, promql_parser.VectorSelector) else None)
    return names


def test_the_five_dashboards_are_kai_s():
    assert [p.name for p in DASHBOARDS] == [
        "kai-controller-runtime-workqueues.json", "kai-queues-allocation.json", "kai-scheduler-internals.json",
        "kai-service-resources.json", "kubernetes-apiserver-scale.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_selects_series_the_components_export(path, metrics):
    found = list(queries(json.loads(path.read_text())))
    assert len(found) > 5
    for where, expr in found:
        assert problems(expr, metrics, tuple(ELSEWHERE)) == [], f"{path.name}: {where}: {expr}"


def test_the_components_export_every_kai_and_process_series_the_dashboards_select(metrics):
    names = set().union(*(selected(p) for p in DASHBOARDS))
    ours = {n for n in names if not n.startswith(tuple(ELSEWHERE))}
    assert ours <= set(metrics)
    assert {n for n in ours if n.startswith("kai_")} and {"process_cpu_seconds_total",
                                                          "process_resident_memory_bytes"} <= ours
    assert {n for n in ours if n.startswith(("workqueue_", "controller_runtime_"))} == {
        "workqueue_adds_total", "workqueue_depth", "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_bucket", "workqueue_retries_total", "workqueue_unfinished_work_seconds",
        "controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
        "controller_runtime_active_workers"}
