"""DRA objects read by the scheduler's cache into the kernel's model, and a bind carrying claim allocations.

The informers' stores are filled through their list path (the transforms run as on a live list).
tests/e2e/test_dra.py runs the same code against a real API server.
"""

from __future__ import annotations

from kai import testing as kt
from kai.api.dra import EXTENDED_ENTRY, Allocation
from kai.kube import dra
from kai.scheduler.cache import ClusterCache
from kai.scheduler.writes import bind_request

DRIVER = "gpu.example.com"
PLUGINS = ("predicates", "proportion", "priority", "dynamicresources", "nodeplacement")


def node(name):
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def gpu_slice(node_name, *models):
    return {"metadata": {"name": f"{node_name}-gpus"},
            "spec": {"driver": DRIVER, "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                     "nodeName": node_name,
                     "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": m}, "index": {"int": i}},
                                  "capacity": {"memory": {"value": "80Gi"}}} for i, m in enumerate(models)]}}


def device_class(name=DRIVER):
    return {"metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def requests(model=None, count=1):
    exactly = {"deviceClassName": DRIVER, "count": count}
    if model:
        exactly["selectors"] = [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{model}"'}}]
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def claim(name, model=None, status=None):
    return {"metadata": {"name": name, "namespace": "ns", "labels": {"kai.scheduler/queue": "q"}},
            "spec": requests(model), "status": status or {}}


def template(name, count=1):
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"spec": requests(count=count)}}


def pod(name, claim_name=None, template_name=None, generated=None):
    entry = {"name": "gpu", **({"resourceClaimName": claim_name} if claim_name else
                               {"resourceClaimTemplateName": template_name})}
    status = {"phase": "Pending"}
    if generated:
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": generated}]
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "annotations": {"pod-group-name": name}},
            "spec": {"schedulerName": "kai-scheduler", "resourceClaims": [entry],
                     "containers": [{"resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}]},
            "status": status}


def podgroup(name):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}"}, "spec": {"queue": "q", "minMember": 1}}


UNLIMITED = {"quota": 0, "limit": -1}
QUEUE = {"metadata": {"name": "q"}, "spec": {"resources": {r: UNLIMITED for r in ("gpu", "cpu", "memory")}}}


def cache_with(**objects) -> ClusterCache:
    cache = ClusterCache(kube=None)
    for name, informer in cache.informers.items():
        informer._replace(objects.get(name, []), "1")
    return cache


def cluster(pods, claims=(), templates=(), slices=None, bindrequests=()):
    return cache_with(nodes=[node("a"), node("b")], queues=[QUEUE], podgroups=[podgroup(p["metadata"]["name"])
                                                                               for p in pods],
                      pods=list(pods), deviceclasses=[device_class()], resourceclaims=list(claims),
                      resourceclaimtemplates=list(templates), bindrequests=list(bindrequests),
                      resourceslices=slices if slices is not None else [gpu_slice("a", "A100"),
                                                                        gpu_slice("b", "H100")])


def test_objects_are_read_into_the_model_and_a_claim_only_node_b_can_satisfy_lands_there():
    cache = cluster([pod("p", "c")], [claim("c", "H100")])
    cycle = cache.snapshot()
    model = cycle.snapshot.dra
    assert sorted(model.classes) == [DRIVER]
    assert [(s.node, [d.attributes["model"] for d in s.devices]) for s in model.slices] == [
        ("a", ["A100"]), ("b", ["H100"])]
    assert model.slices[0].devices[0].capacity["memory"] == 80 * 2**30
    task = cycle.snapshot.jobs["ns/p"].tasks["p"]
    assert task.request.dra_gpus == 1  # a GPU class: counted for the queue
    session = kt.run(cycle.snapshot, PLUGINS)
    assert kt.placements(session) == {"p": "b"}
    body = bind_request(cycle.pods["ns/p"], task, "b", (), 0)
    assert body["spec"]["resourceClaimAllocations"] == [{"name": "gpu", "allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "b", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}]


def test_a_template_claim_is_found_through_the_pods_status_and_its_template_counts_before_it_exists():
    waiting = cluster([pod("p", template_name="t")], templates=[template("t", count=2)]).snapshot()
    task = waiting.snapshot.jobs["ns/p"].tasks["p"]
    assert task.request.dra_gpus == 2
    assert "the claim of template t is not generated yet" in kt.fit_error(kt.run(waiting.snapshot, PLUGINS), "p")
    generated = claim("p-gpu-x1")
    generated["metadata"]["annotations"] = {dra.POD_CLAIM_NAME_ANNOTATION: "gpu"}
    ready = cluster([pod("p", template_name="t", generated="p-gpu-x1")], [generated], [template("t")]).snapshot()
    assert ready.snapshot.jobs["ns/p"].tasks["p"].resource_claims[0].claim == "p-gpu-x1"
    assert ready.snapshot.dra.claims["ns/p-gpu-x1"].from_template
    assert kt.placements(kt.run(ready.snapshot, PLUGINS)) == {"p": "a"}


def test_malformed_objects_are_problems_and_left_out_without_stopping_the_cycle():
    bad_slice = gpu_slice("a", "A100")
    bad_slice["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots"
    both = gpu_slice("b", "H100")
    both["spec"]["allNodes"] = True
    bad_claim = claim("bad")
    bad_claim["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "Some"
    cycle = cluster([pod("p", "c"), pod("q", "bad")], [claim("c"), bad_claim],
                    slices=[bad_slice, both, gpu_slice("c", "H100")]).snapshot()
    problems = {(p.kind, p.name): p for p in cycle.snapshot.problems}
    assert "'lots' is not a Kubernetes quantity" in problems[("ResourceSlice", "a-gpus")].message
    assert "exactly one of spec.nodeName" in problems[("ResourceSlice", "b-gpus")].message
    assert "allocationMode 'Some'" in problems[("ResourceClaim", "ns/bad")].message
    assert problems[("ResourceClaim", "ns/bad")].reason == "InvalidResourceClaim"
    assert [s.name for s in cycle.snapshot.dra.slices] == ["c-gpus"]
    session = kt.run(cycle.snapshot, PLUGINS)
    assert kt.placements(session) == {}  # node c is not a node: no device reachable from a or b
    assert "resource claim ns/bad does not exist" in kt.fit_error(session, "q")


def test_allocations_of_a_pending_bind_request_hold_the_devices_until_the_claim_shows_them():
    pods = [pod("first", "c1"), pod("second", "c2")]
    one_gpu = [gpu_slice("b", "H100")]
    cache = cluster(pods, [claim("c1"), claim("c2")], slices=one_gpu)
    cycle = cache.snapshot()
    session = kt.run(cycle.snapshot, PLUGINS)
    placed = kt.placements(session)
    assert len(placed) == 1  # one device, two pods
    (name, node_name), = placed.items()
    task = cycle.snapshot.jobs[f"ns/{name}"].tasks[name]
    body = bind_request(cycle.pods[f"ns/{name}"], task, node_name, (), 0)
    # the BindRequest as the watch shows it: the other pod must still find the device taken
    body["metadata"]["ownerReferences"][0]["kind"] = "Pod"
    later = cluster(pods, [claim("c1"), claim("c2")], slices=one_gpu, bindrequests=[body]).snapshot()
    held = later.snapshot.dra.claims[f"ns/c{1 if name == 'first' else 2}"]
    assert held.allocation is not None and held.reserved_for == (f"ns/{name}",)
    assert kt.placements(kt.run(later.snapshot, PLUGINS)) == {}
    # so does the cache's own assumption, before the watch shows the BindRequest
    cache.assume_bound(cycle.pods[f"ns/{name}"], node_name, claim_allocations=task.claim_allocations)
    assert kt.placements(kt.run(cache.snapshot().snapshot, PLUGINS)) == {}


def test_an_allocation_survives_the_round_trip_through_json():
    allocation = Allocation(((("gpu", (DRIVER, "b", "gpu-0"))), ("gpu", (DRIVER, "b", "gpu-1"))), "b",
                            admin=frozenset({(DRIVER, "b", "gpu-1")}))
    spec = {"resourceClaimAllocations": [{"name": "gpu", "allocation": dra.allocation_json(allocation)}]}
    assert dra.claim_allocations(spec) == (("gpu", allocation),)
    network = Allocation((("nic", ("net.example.com", "fabric", "nic-0")),), None, None)
    assert dra.claim_allocations({"resourceClaimAllocations": [
        {"name": "nic", "allocation": dra.allocation_json(network)}]}) == (("nic", network),)


def gpu_pod(name, node_name="", phase="Pending"):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "annotations": {"pod-group-name": name}},
            "spec": {"schedulerName": "kai-scheduler", "nodeName": node_name,
                     "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": phase}}


def test_a_gpu_pod_on_a_dra_only_node_carries_its_implicit_claim_until_the_binders_claim_shows_it():
    backing = device_class()
    backing["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    objects = dict(nodes=[node("a")], queues=[QUEUE], deviceclasses=[backing], resourceslices=[gpu_slice("a", "H100")])
    pods = [gpu_pod("first"), gpu_pod("second")]
    cache = cache_with(podgroups=[podgroup("first"), podgroup("second")], pods=pods, **objects)
    cycle = cache.snapshot()
    placed = kt.placements(kt.run(cycle.snapshot, PLUGINS))
    assert len(placed) == 1  # one DRA GPU for two pods
    (name, _), = placed.items()
    other = "second" if name == "first" else "first"
    task = cycle.snapshot.jobs[f"ns/{name}"].tasks[name]
    body = bind_request(cycle.pods[f"ns/{name}"], task, "a", (), 0)
    extended = body["spec"]["extendedResourceClaimAllocation"]
    assert extended["deviceRequests"] == [{"name": "container-0-request-0", "exactly": {
        "deviceClassName": DRIVER, "count": 1, "allocationMode": "ExactCount"}}]
    assert extended["containerMappings"] == [{"containerName": "main", "resourceName": "nvidia.com/gpu",
                                              "requestName": "container-0-request-0"}]
    # while the BindRequest is pending, its implicit claim holds the device
    binding = cache_with(podgroups=[podgroup("first"), podgroup("second")], pods=pods, bindrequests=[body],
                         **objects).snapshot()
    pending = binding.snapshot.jobs[f"ns/{name}"].tasks[name].resource_claims
    assert [c.name for c in pending] == [EXTENDED_ENTRY]
    held_claim = binding.snapshot.dra.claim_of("ns", pending[0])
    assert held_claim.allocation is not None and held_claim.reserved_for == (f"ns/{name}",)
    session = kt.run(binding.snapshot, PLUGINS)
    assert kt.placements(session) == {}
    assert session.plugins.plugin("dynamicresources").ledger.in_use == {(DRIVER, "a", "gpu-0"): held_claim.key}
    # once bound, the claim the binder created holds it, and its GPU is the pod's nvidia.com/gpu, not counted twice
    claim_body = claim("x-extended-resources-abc", status={
        "allocation": extended["allocation"], "reservedFor": [{"resource": "pods", "name": name, "uid": "u"}]})
    claim_body["metadata"]["annotations"] = {dra.EXTENDED_CLAIM_ANNOTATION: "true"}
    claim_body["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": name, "uid": "u", "controller": True}]
    claim_body["spec"] = {"devices": {"requests": extended["deviceRequests"]}}
    bound = cache_with(podgroups=[podgroup("first"), podgroup("second")], resourceclaims=[claim_body],
                       pods=[gpu_pod(name, "a", "Running"), gpu_pod(other)], **objects).snapshot()
    held = bound.snapshot.jobs[f"ns/{name}"].tasks[name]
    assert [c.claim for c in held.resource_claims] == ["x-extended-resources-abc"]
    assert held.request.dra_gpus == 0 and held.request.gpus == 1
    assert kt.placements(kt.run(bound.snapshot, PLUGINS)) == {}
