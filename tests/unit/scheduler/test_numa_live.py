"""NUMA data in a live cycle: NodeResourceTopology and placement annotations read by the cache, the chosen zones
written on the BindRequest, and a cluster without the NRT API."""

from __future__ import annotations

import json

from kai import testing as kt
from kai.api import NumaZone, ZonePlacement
from kai.framework import PluginSpec
from kai.kube.nrt import nrt_view, placement_annotation, placement_json
from kai.scheduler.bindmode import BIND_REQUEST
from kai.scheduler.cache import ClusterCache
from kai.scheduler.commit import Committer
from support.kube import FakeApi

OBSERVED = "kai.scheduler/numa-placement-observed"


def nrt(node, zones, policy="single-numa-node", scope="pod", **extra):
    return {"metadata": {"name": node},
            "attributes": [{"name": "topologyManagerPolicy", "value": policy},
                           {"name": "topologyManagerScope", "value": scope}],
            "zones": [{"name": name, "type": "Node", "resources": [
                {"name": "cpu", "capacity": cpu, "allocatable": cpu, "available": cpu}]}
                      for name, cpu in zones], **extra}


def node(name):
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name, cpu="3", node_name="", phase="Pending", annotations=None):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "annotations": {"pod-group-name": name, **(annotations or {})}},
            "spec": {"schedulerName": "kai-scheduler", "nodeName": node_name,
                     "containers": [{"resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]},
            "status": {"phase": phase, "qosClass": "Guaranteed"}}


def podgroup(name):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}"}, "spec": {"queue": "q", "minMember": 1}}


def cache_with(kube=None, **objects) -> ClusterCache:
    cache = ClusterCache(kube)
    objects.setdefault("queues", [{"metadata": {"name": "q"}, "spec": {"resources": {"gpu": {"quota": 0,
                                                                                            "limit": -1}}}}])
    objects["podgroups"] = [podgroup(p["metadata"]["name"]) for p in objects.get("pods", [])]
    for name, informer in cache.informers.items():
        informer._replace(objects.get(name, []), "1")
    return cache


def test_nrt_view_reads_policy_scope_and_numa_node_zones_in_numa_order():
    raw = nrt("n1", [("node-10", "8"), ("node-2", "4")], scope="container")
    raw["zones"].append({"name": "socket-0", "type": "Socket", "resources": []})
    view = nrt_view(raw)
    assert (view.topology.policy, view.topology.scope, view.invalid) == ("single-numa-node", "container", None)
    assert view.topology.zones == (NumaZone("node-2", {"cpu": 4000.0}, {"cpu": 4000.0}),
                                   NumaZone("node-10", {"cpu": 8000.0}, {"cpu": 8000.0}))
    legacy = nrt_view({"metadata": {"name": "n"}, "topologyPolicies": ["RestrictedPodLevel"],
                       "zones": nrt("n", [("node-0", "4")])["zones"]})
    assert (legacy.topology.policy, legacy.topology.scope) == ("restricted", "pod")
    assert nrt_view({"metadata": {"name": "n"}, "zones": []}).topology is None


def test_a_malformed_nrt_or_annotation_is_a_reason_not_an_exception():
    bad = nrt("n1", [("node-0", "four")])
    view = nrt_view(bad)
    assert view.topology is None and "NodeResourceTopology n1 cannot be read" in view.invalid
    assert "cpu quantity 'four'" in view.invalid
    record, why = placement_annotation({OBSERVED: "{not json"}, OBSERVED)
    assert record == () and why.startswith(f"annotation {OBSERVED} is ignored")
    record, why = placement_annotation({OBSERVED: json.dumps([{"zone": "node-1", "amount": {"cpu": "2500m"}}])},
                                       OBSERVED)
    assert record == (ZonePlacement("node-1", {"cpu": 2500.0}),) and why is None
    assert placement_json(record) == [{"zone": "node-1", "amount": {"cpu": "2500m"}}]


def test_the_cache_gives_nodes_their_zones_and_placed_pods_their_records():
    observed = json.dumps([{"zone": "node-0", "amount": {"cpu": "3"}}])
    cache = cache_with(nodes=[node("n1"), node("n2")], noderesourcetopologies=[
        nrt("n1", [("node-0", "4"), ("node-1", "4")]), nrt("n2", [("node-0", "x")]), nrt("gone", [("node-0", "4")])],
        pods=[pod("run", node_name="n1", phase="Running", annotations={OBSERVED: observed}),
              pod("bad", node_name="n1", phase="Running", annotations={OBSERVED: "[]"})])
    snap = cache.snapshot(now=100.0).snapshot
    nodes = {n.name: n for n in snap.nodes}
    assert [z.id for z in nodes["n1"].numa.zones] == ["node-0", "node-1"] and nodes["n2"].numa is None
    assert snap.jobs["ns/run"].tasks["run"].numa_recorded == (ZonePlacement("node-0", {"cpu": 3000.0}),)
    assert snap.jobs["ns/run"].tasks["run"].qos_class == "Guaranteed"
    assert {(p.kind, p.name, p.reason) for p in snap.problems} >= {
        ("node", "n2", "InvalidNodeResourceTopology"), ("task", "ns/bad", "InvalidNumaPlacement")}
    session = kt.run(snap, ["predicates", "numa"])
    assert session.plugins.plugin("numa").zones_available("n1") == [{"cpu": 1000.0}, {"cpu": 4000.0}]


class RecordingKube(FakeApi):
    """Accepts every request (replying ``{}``); without ``served``, the NodeResourceTopology API is not there."""

    def __init__(self, served: bool = True) -> None:
        super().__init__()
        if not served:
            self.fail(404, "Not Found", "GET", "/apis/topology.node.k8s.io/v1alpha2", times=None)

    def serve(self, method, path, query, body, content_type):
        return {}


def test_the_chosen_zones_go_on_the_bind_request_and_count_while_it_is_pending():
    kube = RecordingKube()
    cache = cache_with(kube, nodes=[node("n1")], noderesourcetopologies=[nrt("n1", [("node-0", "4"), ("node-1", "4")])],
                       pods=[pod("a")])
    committer = Committer(kube, cache, workers=1, bind_mode=BIND_REQUEST)
    plugins = ["predicates", PluginSpec("numa")]
    cycle = cache.snapshot(now=1000.0)
    committer.commit(kt.run(cycle.snapshot, plugins), cycle)
    assert committer.flush(10)
    (body,) = [b for m, p, b in kube.calls if m == "POST" and p.endswith("/bindrequests")]
    assert body["spec"]["predictedNUMAZones"] == [{"zone": "node-0", "amount": {"cpu": "3"}}]
    # The next cycle sees the pod Binding on its assumed zones: a second pod gets the other zone.
    cache.informers["pods"]._replace([pod("a"), pod("b")], "2")
    cache.informers["podgroups"]._replace([podgroup("a"), podgroup("b")], "2")
    session = kt.run(cache.snapshot(now=1001.0).snapshot, plugins)
    (bind,) = session.decisions
    assert bind.task.name == "b" and [zp.zone for zp in bind.numa_zones] == ["node-1"]


def test_a_pod_bound_directly_gets_the_chosen_zones_as_the_binders_annotation():
    kube = RecordingKube()
    cache = cache_with(kube, nodes=[node("n1")], noderesourcetopologies=[nrt("n1", [("node-0", "4"), ("node-1", "4")])],
                       pods=[pod("a")])
    committer = Committer(kube, cache, workers=1)
    cycle = cache.snapshot(now=1000.0)
    committer.commit(kt.run(cycle.snapshot, ["predicates", PluginSpec("numa")]), cycle)
    assert committer.flush(10)
    (body,) = [b for m, p, b in kube.calls if m == "POST" and p.endswith("/binding")]
    zones = body["metadata"]["annotations"]["kai.scheduler/numa-placement-predicted"]
    assert json.loads(zones) == [{"zone": "node-0", "amount": {"cpu": "3"}}]


def test_without_the_nrt_api_the_informer_is_not_started_and_counts_as_synced():
    kube = RecordingKube(served=False)
    cache = ClusterCache(kube)
    informer = cache.informers["noderesourcetopologies"]
    for name, other in cache.informers.items():  # only the optional informer is looked at here
        if name != "noderesourcetopologies":
            other.start = lambda: None
    cache.start()
    assert informer.synced.is_set() and informer._thread is None
    assert ("GET", "/apis/topology.node.k8s.io/v1alpha2", None) in kube.calls
    cache.stop()
