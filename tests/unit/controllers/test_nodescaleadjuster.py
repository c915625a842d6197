"""The node scale adjuster: which pending shared-GPU pods get scaling pods, their spec, and when they go."""

from __future__ import annotations

import threading

import pytest

from kai.controllers import nodescaleadjuster as nsa
from kai.controllers.nodescaleadjuster import (
    NodeScaleAdjuster,
    needed_devices,
    scaling_pod,
    slim_scaling_pod,
    slim_shared_pod,
)
from kai.controllers.scalingpod import main as scaling_pod_main
from support.kube import FakeApi
from support.waiting import wait_until

SCALING = "/api/v1/namespaces/kai-scale-adjust/pods"
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no node"}


REQUESTS = [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]


def raw_pod(name, fraction="0.5", namespace="ns", memory=None, devices=None, condition=UNSCHEDULABLE, node="",
            scheduler="kai-scheduler", phase="Pending", containers=None, **spec):
    annotations = {"gpu-fraction": fraction} if fraction else {}
    if memory:
        annotations["gpu-memory"] = memory
    if devices:
        annotations["gpu-fraction-num-devices"] = devices
    return {"metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "spec": {"schedulerName": scheduler, "nodeName": node, **spec,
                     "containers": containers or REQUESTS},
            "status": {"phase": phase, "conditions": [condition] if condition else []}}


def shared(*args, **kwargs):
    return slim_shared_pod(raw_pod(*args, **kwargs), "kai-scheduler")


class Store(dict):
    def list(self):
        return list(self.values())


class Clock:
    now = 1000.0

    def __call__(self):
        return self.now


def adjuster(*pods, scaling=(), **kwargs):
    kube, clock = FakeApi(), Clock()
    a = NodeScaleAdjuster(kube, clock=clock, **kwargs)
    a.stores = {"pods": Store({p["key"]: p for p in pods}),
                "scaling": Store({f"kai-scale-adjust/{s['name']}": s for s in scaling})}
    return a, kube, clock


def listed(a, kube):
    """The informer catching up: the store holds what the API server holds, and the created ones are seen."""
    store = a.stores["scaling"]
    store.clear()
    for path, obj in kube.objects.items():
        if path.startswith(SCALING + "/"):
            slim = slim_scaling_pod(obj)
            store[f"kai-scale-adjust/{slim['name']}"] = slim
            a._scaling_changed("ADDED", slim)


def created(kube):
    return {path.rsplit("/", 1)[1]: obj for path, obj in kube.objects.items() if path.startswith(SCALING + "/")}


# -- what is kept of a pod -----------------------------------------------------------------------
def test_only_pods_of_the_scheduler_asking_for_a_fraction_are_kept():
    assert shared("p")["unschedulable"] is True
    assert shared("p", fraction=None, memory="2000")["annotations"] == {"gpu-memory": "2000"}
    assert shared("p", scheduler="default-scheduler") is None
    assert shared("p", fraction=None) is None
    assert shared("p", fraction="") is None  # KAI: an empty annotation asks for nothing
    assert shared("p", condition=None)["unschedulable"] is None
    assert shared("p", condition={"type": "PodScheduled", "status": "True"})["unschedulable"] is False


# -- how many GPUs ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("pods", "gpus"), [
    ([shared("a"), shared("b")], 1),  # two halves make one GPU
    ([shared("a"), shared("b"), shared("c")], 2),
    ([shared("a", "0.3"), shared("b", "0.3"), shared("c", "0.4")], 1),
    ([shared("a", "0.5", devices="3")], 2),  # 0.5 of each of 3 devices
    ([shared(str(i), fraction=None, memory="4000") for i in range(10)], 1),  # gpu-memory counts 0.1 each
    ([shared(str(i), fraction=None, memory="4000") for i in range(11)], 2),
    ([shared("a", "0.333")], 1),
    ([], 0),
])
def test_fractions_are_summed_in_hundredths_and_rounded_up(pods, gpus):
    assert needed_devices(pods, 0.1)[0] == gpus


def test_a_pod_with_an_unreadable_request_is_left_out():
    good, bad = shared("good"), shared("bad", "half")
    odd_devices, odd_memory = shared("n", devices="two"), shared("m", fraction=None, memory="1Gi")
    assert needed_devices([good, bad, odd_devices, odd_memory], 0.1) == (1, [good])
    assert needed_devices([shared("m", fraction=None, memory="1000")], 0.5)[0] == 1


# -- the scaling pod ---------------------------------------------------------------------------------
def test_scaling_pod_asks_for_whole_gpus_with_the_pods_requests_and_placement():
    placement = {"nodeSelector": {"pool": "a100"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
                 "affinity": {"nodeAffinity": {}}}
    pod = shared("train", devices="2", containers=[
        {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        {"name": "b", "resources": {"requests": {"cpu": "1"}}}, {"name": "c"}], **placement)
    body = scaling_pod(pod, 2)
    assert body["metadata"] == {"name": "ns-train", "namespace": "kai-scale-adjust",
                                "labels": {"app": "scaling-pod", "shared-gpu-pod-name": "train",
                                           "shared-gpu-pod-namespace": "ns"}}
    spec = body["spec"]
    assert "schedulerName" not in spec  # the default scheduler's, which autoscalers simulate
    assert {k: spec[k] for k in placement} == placement
    assert spec["restartPolicy"] == "OnFailure" and spec["serviceAccountName"] == "scaling-pod"
    (container,) = spec["containers"]
    assert container["name"] == "scaling-pod" and container["image"] == nsa.IMAGE
    assert container["command"] == ["kai-scaling-pod"]
    assert container["resources"] == {"requests": {"nvidia.com/gpu": "2", "cpu": "1500m", "memory": "1073741824"},
                                      "limits": {"nvidia.com/gpu": "2"}}
    bare = scaling_pod(shared("p", containers=[{"name": "c"}]), 1, service_account="", image="img", app="x")
    assert bare["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    assert "serviceAccountName" not in bare["spec"] and bare["metadata"]["labels"]["app"] == "x"


def test_the_scaling_pods_program_exits_at_once():
    assert scaling_pod_main() == 0


# -- rounds ------------------------------------------------------------------------------------------
def test_a_pending_fraction_gets_a_scaling_pod_marked_unschedulable():
    a, kube, _ = adjuster(shared("p"), shared("placed", condition={"type": "PodScheduled", "status": "True"}),
                          shared("bound", node="n1"), shared("done", phase="Succeeded"), shared("new", condition=None))
    assert a.adjust() is None
    (pod,) = created(kube).values()
    assert pod["metadata"]["name"] == "ns-p"
    assert pod["status"]["conditions"] == [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    assert a.adjust() is None  # the store does not show it yet: not created twice
    assert kube.paths("POST") == [SCALING]


def test_pods_share_scaling_pods_until_the_sum_or_a_larger_pod_needs_more():
    a, kube, _ = adjuster(shared("a"), shared("b"))
    a.adjust()
    assert list(created(kube)) == ["ns-a"]  # one GPU for two halves
    listed(a, kube)
    a.stores["pods"]["ns/c"] = shared("c", "0.5", devices="2")
    a.adjust()  # 2 GPUs needed: b gets one for the sum; c still needs two devices, more than the largest gives
    assert list(created(kube)) == ["ns-a", "ns-b", "ns-c"]
    assert created(kube)["ns-c"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}


def test_the_scaling_pod_goes_once_its_pod_is_placed_or_gone_and_a_cool_down_follows():
    a, kube, clock = adjuster(shared("p"), shared("q", "0.4"))
    a.adjust()
    listed(a, kube)
    assert set(created(kube)) == {"ns-p"}  # p's scaling pod stands for both
    a.stores["pods"]["ns/p"] = shared("p", node="n1", condition={"type": "PodScheduled", "status": "True"})
    assert a.adjust() == nsa.COOL_DOWN  # deleted; q waits out the cool-down
    assert created(kube) == {}
    clock.now += 30
    assert a.adjust() == 30.0
    clock.now += 30
    assert a.adjust() is None
    assert set(created(kube)) == {"ns-q"}
    listed(a, kube)
    del a.stores["pods"]["ns/q"]  # gone
    a.adjust()
    assert created(kube) == {}


def test_a_completed_scaling_pod_goes_and_a_foreign_pod_is_left_alone():
    done = {"name": "ns-p", "labels": {"shared-gpu-pod-name": "p", "shared-gpu-pod-namespace": "ns"},
            "phase": "Succeeded", "gpus": "1"}
    foreign = {"name": "other", "labels": {}, "phase": "Pending", "gpus": "4"}
    a, kube, _ = adjuster(scaling=[done, foreign])
    kube.add(f"{SCALING}/ns-p", {"metadata": {"name": "ns-p"}})
    kube.add(f"{SCALING}/other", {"metadata": {"name": "other"}})
    a.adjust()
    assert kube.paths("DELETE") == [f"{SCALING}/ns-p"]
    assert a.adjust() == nsa.COOL_DOWN and kube.paths("DELETE") == [f"{SCALING}/ns-p"]  # deleted once


def test_one_bad_pod_never_stops_the_others():
    a, kube, _ = adjuster(shared("a", devices="4"), shared("b", devices="3"))
    kube.fail(403, "Forbidden", "POST", SCALING)
    assert a.adjust() == nsa.RETRY_DELAY
    assert list(created(kube)) == ["ns-b"]
    assert a.adjust() is None
    assert set(created(kube)) == {"ns-a", "ns-b"}


def test_a_failed_delete_is_retried():
    a, kube, _ = adjuster(shared("p"))
    a.adjust()
    listed(a, kube)
    del a.stores["pods"]["ns/p"]
    kube.fail(500, "Internal", "DELETE")
    assert a.adjust() == nsa.RETRY_DELAY and created(kube)
    assert a.adjust() == nsa.COOL_DOWN and not created(kube)


def test_running_against_the_api_it_follows_the_pods_through_its_informers():
    kube = FakeApi()
    kube.add("/api/v1/namespaces/ns/pods/p", raw_pod("p"))
    kube.add("/api/v1/namespaces/ns/pods/other", raw_pod("other", scheduler="default-scheduler"))
    a = NodeScaleAdjuster(kube)
    stop = threading.Event()
    thread = threading.Thread(target=a.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: set(created(kube)) == {"ns-p"}, 5, "the scaling pod")
        wait_until(lambda: a.stores["scaling"].get("kai-scale-adjust/ns-p"), 5, "the scaling pod listed")
        placed = raw_pod("p", node="n1", condition={"type": "PodScheduled", "status": "True"})
        kube.add("/api/v1/namespaces/ns/pods/p", placed)
        wait_until(lambda: not created(kube), 5, "the scaling pod deleted")
        wait_until(lambda: not a.stores["scaling"].list(), 5, "the deletion seen")
        assert kube.paths("DELETE") == [f"{SCALING}/ns-p"] and not a._deleted and not a._created
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
