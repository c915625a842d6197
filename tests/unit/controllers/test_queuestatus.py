"""Queue status sums, the status patch and queue metric values; quantities."""

from __future__ import annotations

from decimal import Decimal

import pytest

from kai.common.quantity import QuantityError, format_quantity, parse, sum_resources
from kai.controllers.queuestatus import metric_values, queue_status, slim_podgroup, status_patch


def queue(name, parent="", allocated=None, requested=None, **resources):
    return {"metadata": {"name": name}, "spec": {"parentQueue": parent, "resources": resources},
            "status": {"allocated": allocated or {}, "requested": requested or {}}}


def podgroup(name, queue_name, allocated=None, non_preemptible=None, requested=None):
    return slim_podgroup({
        "metadata": {"name": name, "namespace": "ns"}, "spec": {"queue": queue_name},
        "status": {"resourcesStatus": {"allocated": allocated or {}, "allocatedNonPreemptible": non_preemptible or {},
                                       "requested": requested or {}}}})


def test_sums_children_and_podgroups_exactly():
    queues = [
        queue("root"),
        queue("a", "root", allocated={"cpu": "1500m", "nvidia.com/gpu": "2"}, requested={"cpu": "2"}),
        queue("b", "root", allocated={"cpu": "500m", "memory": "1Gi"}),
        queue("other", "elsewhere", allocated={"cpu": "100"}),
    ]
    pgs = [podgroup("pg1", "root", allocated={"cpu": "100m"}, non_preemptible={"cpu": "100m"},
                    requested={"cpu": "0.1"})]
    status = queue_status("root", queues, pgs)
    assert status == {
        "childQueues": ["a", "b"],
        "allocated": {"cpu": "2100m", "memory": "1073741824", "nvidia.com/gpu": "2"},
        "allocatedNonPreemptible": {"cpu": "100m"},
        "requested": {"cpu": "2100m"},
    }


def test_leaf_with_no_podgroups_has_empty_sums():
    assert queue_status("leaf", [queue("leaf", "root")], []) == {
        "childQueues": [], "allocated": {}, "allocatedNonPreemptible": {}, "requested": {}}


def test_status_patch_only_when_changed_and_nulls_vanished_resources():
    wanted = {"childQueues": ["a"], "allocated": {"cpu": "1"}, "allocatedNonPreemptible": {}, "requested": {}}
    same = {"childQueues": ["a"], "allocated": {"cpu": "1000m"}}
    assert status_patch(same, wanted) is None  # 1000m == 1: no write
    current = {"childQueues": ["a", "gone"], "allocated": {"cpu": "2", "memory": "1Gi"}, "requested": {"cpu": "1"}}
    assert status_patch(current, wanted) == {
        "childQueues": ["a"], "allocated": {"cpu": "1", "memory": None}, "requested": None}


def test_metric_values_follow_kai_units():
    q = queue("q", allocated={"cpu": "2500m", "memory": "2Gi", "nvidia.com/gpu": "1.33333"},
              cpu={"quota": 4000}, memory={"quota": -1}, gpu={"quota": 3})
    assert metric_values(q) == {
        "queue_deserved_gpus": 3.0,
        "queue_quota_cpu_cores": 4.0,
        "queue_quota_memory_bytes": -1.0,
        "queue_allocated_gpus": 1.3333,
        "queue_allocated_cpu_cores": 2.5,
        "queue_allocated_memory_bytes": 2.0 * 2**30,
    }
    q = queue("q", cpu={"quota": -1}, memory={"quota": 512})
    values = metric_values(q)
    assert values["queue_quota_cpu_cores"] == -1 and values["queue_quota_memory_bytes"] == 512e6
    assert values["queue_allocated_gpus"] == 0


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", Decimal("0.5")), ("2", Decimal(2)), ("1Ki", Decimal(1024)), ("1e3", Decimal(1000)),
     ("1.5G", Decimal(1500000000)), (".5", Decimal("0.5")), (3, Decimal(3))],
)
def test_parse_quantities(text, value):
    assert parse(text) == value


@pytest.mark.parametrize("text", ["", "1.2.3", "5 m", "10Xi", "cpu", True])
def test_bad_quantities_are_errors(text):
    with pytest.raises(QuantityError):
        parse(text)


@pytest.mark.parametrize(("value", "text"), [("0.5", "500m"), ("3", "3"), ("0.0000015", "1500n"),
                                             ("1.0000000001", "1.0000000001")])
def test_format_round_trips(value, text):
    assert format_quantity(Decimal(value)) == text
    assert parse(text) == Decimal(value)


def test_sum_resources_skips_missing_lists():
    assert sum_resources([None, {"cpu": "1"}, {}, {"cpu": "250m"}]) == {"cpu": Decimal("1.25")}
