"""PodGroup resource status from its pods: requested, allocated, non-preemptible, GPU sharing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from kai.api.resources import GpuRequestError
from kai.controllers.podgroupstatus import PodGroupController, pod_resources, slim_pod, slim_podgroup
from kai.kube import dra, views


def raw_pod(name, phase="Running", node="n1", requests=({"cpu": "500m", "memory": "1Gi"},), scheduled=True,
            group="pg", **annotations):
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": {"pod-group-name": group, **annotations}},
        "spec": {"nodeName": node, "containers": [{"name": f"c{i}", "resources": {"requests": r}}
                                                  for i, r in enumerate(requests)]},
        "status": {"phase": phase,
                   "conditions": [{"type": "PodScheduled", "status": "True" if scheduled else "False"}]},
    }


def no_node_memory(node):
    raise AssertionError("node memory not needed")


def test_running_pod_counts_requested_and_allocated():
    pod = slim_pod(raw_pod("p", requests=({"cpu": "500m"}, {"cpu": "1", "nvidia.com/gpu": "2"})))
    requested, allocated = pod_resources(pod, no_node_memory)
    assert requested == allocated == {"cpu": Decimal("1.5"), "nvidia.com/gpu": Decimal(2)}


def test_pending_pod_is_requested_and_allocated_only_once_scheduled():
    requested, allocated = pod_resources(slim_pod(raw_pod("p", phase="Pending", node="", scheduled=False)),
                                         no_node_memory)
    assert requested and not allocated
    _, allocated = pod_resources(slim_pod(raw_pod("p", phase="Pending", scheduled=True)), no_node_memory)
    assert allocated == {"cpu": Decimal("0.5"), "memory": Decimal(2**30)}


def test_finished_pods_count_nothing():
    assert pod_resources(slim_pod(raw_pod("p", phase="Succeeded")), no_node_memory) == ({}, {})


def test_shared_gpu_requests_and_received_fractions():
    pod = slim_pod(raw_pod("p", **{"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2",
                                   "received-resource-type": "Fraction"}))
    requested, allocated = pod_resources(pod, no_node_memory)
    assert requested["nvidia.com/gpu"] == 1 and allocated["nvidia.com/gpu"] == Decimal("0.5")
    pod = slim_pod(raw_pod("p", **{"gpu-memory": "4000", "received-resource-type": "Fraction"}))
    requested, allocated = pod_resources(pod, lambda node: 16000 if node == "n1" else 0)
    assert requested["run.ai/gpu.memory"] == 4000 and allocated["nvidia.com/gpu"] == Decimal("0.25")
    with pytest.raises(GpuRequestError, match="nvidia.com/gpu.memory"):
        pod_resources(pod, lambda node: 0)


def test_pods_without_a_podgroup_are_not_kept():
    raw = raw_pod("p")
    del raw["metadata"]["annotations"]["pod-group-name"]
    assert slim_pod(raw) is None


class Store(dict):
    def list(self):
        return list(self.values())


def controller(preemptibility="", priority_class="train"):
    c = PodGroupController(kube=None)
    pg = slim_podgroup({"metadata": {"name": "pg", "namespace": "ns"},
                        "spec": {"priorityClassName": priority_class, "preemptibility": preemptibility}})
    c.stores = {"priorityclasses": Store({"train": ("train", 50, False), "inference": ("inference", 125, False)}),
                    "podgroups": Store({"ns/pg": pg}), "pods": Store(), "resourceclaims": Store()}
    return c, pg[0]


@pytest.mark.parametrize(("priority_class", "preemptibility", "non_preemptible"), [
    ("train", "", False), ("inference", "", True), ("train", "non-preemptible", True),
    ("inference", "preemptible", False), ("unknown", "", False),  # unknown class: default 50, preemptible
])
def test_status_sums_pods_and_marks_non_preemptible_allocation(priority_class, preemptibility, non_preemptible):
    c, pg = controller(preemptibility, priority_class)
    pods = [slim_pod(raw_pod("a")), slim_pod(raw_pod("b", phase="Pending", node="", scheduled=False)),
            slim_pod(raw_pod("bad", requests=({"cpu": "lots"},)))]
    status = c.resources_status(pg, pods)
    assert status["requested"] == {"cpu": "1", "memory": "2147483648"}
    assert status["allocated"] == {"cpu": "500m", "memory": "1073741824"}
    assert status["allocatedNonPreemptible"] == (status["allocated"] if non_preemptible else {})
    assert views.DEFAULT_PRIORITY < 100


def test_a_podgroup_turned_preemptible_has_its_non_preemptible_allocation_cleared():
    # KAI after v0.17 (#2232): the reported non-preemptible allocation goes once the PodGroup is preemptible.
    class Kube:
        def __init__(self):
            self.patches = []

        def patch(self, path, body, subresource=None):
            self.patches.append(body)

    c, _ = controller(preemptibility="preemptible", priority_class="inference")
    was = {"allocated": {"cpu": "500m", "memory": "1073741824"},
           "allocatedNonPreemptible": {"cpu": "500m", "memory": "1073741824"},
           "requested": {"cpu": "500m", "memory": "1073741824"}}
    c.stores["podgroups"]["ns/pg"] = (c.stores["podgroups"]["ns/pg"][0], was)
    c.stores["pods"]["ns/a"] = slim_pod(raw_pod("a"))
    c._by_group["ns/pg"] = {"ns/a"}
    c.kube = Kube()
    assert c.reconcile("ns/pg")
    assert c.kube.patches == [{"status": {"resourcesStatus": {"allocatedNonPreemptible": {"cpu": None,
                                                                                          "memory": None}}}}]


def test_pod_moving_between_groups_refreshes_both():
    c, _ = controller()
    c.on_pod("ADDED", slim_pod(raw_pod("p", group="one")))
    assert [c.queue.get(0)] == ["ns/one"]
    c.queue.done("ns/one")
    c.on_pod("MODIFIED", slim_pod(raw_pod("p", group="two")))
    assert sorted([c.queue.get(0), c.queue.get(0)]) == ["ns/one", "ns/two"]
    assert c._by_group["ns/one"] == set() and c._by_group["ns/two"] == {"ns/p"}


def dra_claim(name, device_class="gpu.nvidia.com", count=2):
    return dra.resource_claim_view({"metadata": {"name": name, "namespace": "ns"}, "spec": {"devices": {"requests": [
        {"name": "r", "exactly": {"deviceClassName": device_class, "count": count}}]}}})


def test_the_gpus_of_a_pods_resource_claims_count_under_their_device_class_and_a_claim_change_refreshes():
    c, pg = controller()
    c.stores["resourceclaims"].update({"ns/gpus": dra_claim("gpus"), "ns/nic": dra_claim("nic", "nic.example.com")})
    raw = raw_pod("a")
    raw["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimName": "gpus"},
                                     {"name": "n", "resourceClaimTemplateName": "nics"}]
    raw["status"]["resourceClaimStatuses"] = [{"name": "n", "resourceClaimName": "nic"}]
    pending = raw_pod("b", phase="Pending", node="", scheduled=False)
    pending["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimName": "absent"}]
    pods = [slim_pod(raw), slim_pod(pending)]
    assert pods[0]["claims"] == ("ns/gpus", "ns/nic")
    status = c.resources_status(pg, pods)
    assert status["allocated"] == {"cpu": "500m", "memory": "1073741824", "gpu.nvidia.com": "2"}
    assert status["requested"]["gpu.nvidia.com"] == "2"  # the missing claim of the pending pod adds nothing
    c.on_pod("ADDED", pods[0])
    c.queue.done(c.queue.get(0))
    c.on_claim("MODIFIED", dra_claim("gpus", count=1))
    assert c.queue.get(0) == "ns/pg"
