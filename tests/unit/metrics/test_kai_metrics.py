"""KAI v0.17's metrics are exported by the same component under KAI's name, with KAI's type and labels, and
``/metrics`` names their samples as KAI's Go client does; every metric exported is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kai.metrics import BinderMetrics, ControllerMetrics, Family, QueueMetrics, Registry, SchedulerMetrics, exposition

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "metrics.md"
#: KAI's list (component, name, type, labels); its header says how it was made.
KAI_V017 = Path(__file__).with_name("kai_v017_metrics.txt")
COMPONENTS = {"scheduler": SchedulerMetrics, "binder": BinderMetrics, "queue-controller": QueueMetrics,
              "controllers": ControllerMetrics}
#: A line of the text format: its sample name.
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", re.M)
TYPE = re.compile(r"^# TYPE (\S+) (\S+)$", re.M)


def kai_metrics() -> list[tuple[str, str, str, frozenset[str]]]:
    rows = []
    for line in KAI_V017.read_text().splitlines():
        if line and not line.startswith("#"):
            component, name, kind, labels = line.split()
            rows.append((component, name, kind, frozenset() if labels == "-" else frozenset(labels.split(","))))
    return rows


def exported(component: str) -> dict[str, Family]:
    registry = Registry()
    COMPONENTS[component](registry)
    return {f.name: f for f in registry.families}


def test_kai_s_list_is_complete():
    assert len(kai_metrics()) == 34  # METRICS.md at d5bc503a: 7 of the queue controller, 27 of the scheduler
    assert {c for c, *_ in kai_metrics()} <= set(COMPONENTS)


@pytest.mark.parametrize(("component", "name", "kind", "labels"), kai_metrics(), ids=lambda v: str(v))
def test_kai_metric_is_exported_under_its_name_with_its_type_and_labels(component, name, kind, labels):
    families = exported(component)
    assert f"kai_{name}" in families, f"kai_{name} is not exported by the {component}"
    family = families[f"kai_{name}"]
    assert family.type == kind
    assert set(family.labels) == labels


def test_metrics_are_served_under_kai_s_sample_names_and_types():
    registry = Registry()
    metrics = SchedulerMetrics(registry)
    metrics.podgroup_scheduled("allocate")
    metrics.preemption_attempt()
    metrics.pods_evicted("train", "team-a", "uid-1", "default", "preempt")
    metrics.task_scheduled(0.012)
    text = exposition(registry).decode()
    samples = set(SAMPLE.findall(text))
    assert {"kai_podgroups_scheduled_by_action", "kai_total_preemption_attempts", "kai_pod_group_evicted_pods_total",
            "kai_task_scheduling_latency_milliseconds_bucket", "kai_e2e_scheduling_latency_milliseconds"} <= samples
    assert not {s for s in samples if s.endswith(("_total_total", "_created"))}
    types = dict(TYPE.findall(text))
    assert types["kai_podgroups_scheduled_by_action"] == types["kai_total_preemption_attempts"] == "counter"
    assert types["kai_pod_group_evicted_pods_total"] == "counter"
    assert 'kai_task_scheduling_latency_milliseconds_bucket{le="20.0"} 1.0' in text  # 12 ms, KAI's buckets
    assert "kai_task_scheduling_latency_milliseconds_sum 12.0" in text
    # every family is named as its samples are: a TYPE line precedes each sample's family
    assert all(s in types or s.rsplit("_", 1)[0] in types for s in samples)


def test_fair_share_memory_is_in_kai_s_gb():
    registry = Registry()
    SchedulerMetrics(registry).fair_share("a", cpu_millicores=1500, memory_bytes=3e9, gpus=1)
    labels = {"queue_name": "a", "queue_metadata_name": "a", "queue_display_name": ""}
    assert registry.value("kai_queue_fair_share_memory_gb", labels) == 3.0
    assert registry.value("kai_queue_fair_share_cpu_cores", labels) == 1.5


def test_every_exported_metric_is_documented():
    documented = set(re.findall(r"`(\w+)`", DOC.read_text()))
    for component in COMPONENTS:
        names = set(exported(component))
        assert names - documented == set(), f"{component}: not in docs/metrics.md"
