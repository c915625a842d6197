"""The ``dynamicresources`` plugin: CEL selectors, counts, All mode, shared and allocated claims, the ledger
through statements, DRA GPUs in queue quota, gangs, and preemption reusing a victim's device."""

from __future__ import annotations

import pytest

from kai import testing as kt
from kai.api import ContainerRequest, ResourceRequest, TaskStatus
from kai.api.dra import (
    ALL,
    Allocation,
    Device,
    DeviceClass,
    DeviceRequest,
    DynamicResources,
    PodResourceClaim,
    ResourceClaim,
    ResourceSlice,
    pod_gpus,
)
from kai.api.names import QUEUE_LABEL
from kai.api.selectors import LabelRequirement, NodeSelectorTerm
from kai.framework import PluginSpec, Session, cluster_capacity
from kai.framework.statement import Statement
from kai.plugins.dynamicresources.extended import implicit_requests

DRIVER = "gpu.example.com"
GPU_CLASS = DeviceClass("gpu.example.com", (f'device.driver == "{DRIVER}"',))
PLUGINS = ("predicates", "proportion", "priority", "dynamicresources", "nodeplacement")


def gpus(node, *models, pool=None, memory="80Gi"):
    """A node-local slice of GPUs on ``node``, one device per model."""
    devices = tuple(Device(f"gpu-{i}", {"model": m, "index": i}, {"memory": _gi(memory)}) for i, m in enumerate(models))
    return ResourceSlice(f"{node}-gpus", DRIVER, pool or node, devices, node=node)


def _gi(text):
    return float(text[:-2]) * 2**30


def claim(name, count=1, mode="ExactCount", selectors=(), device_class="gpu.example.com", admin=False, **fields):
    """A claim pods name directly, labelled with the queue of kai.testing's jobs (KAI requires it of GPU claims)."""
    fields.setdefault("labels", {QUEUE_LABEL: "default"})
    return ResourceClaim("default", name, (DeviceRequest("gpu", device_class, tuple(selectors), mode, count, admin),),
                         **fields)


def pod(name, *claims, status=TaskStatus.PENDING, node=None):
    """A task using ``claims`` (ResourceClaim objects), its DRA GPUs counted in its request."""
    request = ResourceRequest(cpu=100, memory=1e6, dra_gpus=pod_gpus(claims))
    return kt.task(name, status=status, node=node, request=request,
                   resource_claims=tuple(PodResourceClaim(c.name, c.name) for c in claims))


def dra(*objects):
    classes = [o for o in objects if isinstance(o, DeviceClass)] or [GPU_CLASS]
    return DynamicResources.of(classes, [o for o in objects if isinstance(o, ResourceSlice)],
                               [o for o in objects if isinstance(o, ResourceClaim)])


def run(nodes, jobs, objects, actions=("allocate",), queues=None, plugins=PLUGINS):
    return kt.run(kt.cluster(nodes, queues=queues, jobs=jobs, dra=dra(*objects)), list(plugins), actions)


def opened(nodes, jobs, objects, plugins=PLUGINS):
    session = Session(kt.cluster(nodes, jobs=jobs, dra=dra(*objects)), kt.plugin_manager(list(plugins))).open()
    return session, session.plugins.plugin("dynamicresources")


NODES = [kt.node("n1"), kt.node("n2")]


# --- selectors ----------------------------------------------------------------------------------------


def test_class_and_request_selectors_choose_the_node_whose_device_matches():
    c = claim("c", selectors=['device.attributes["gpu.example.com"].model == "H100"'])
    s = run(NODES, [kt.job("a", tasks=[pod("a-0", c)])], [gpus("n1", "A100"), gpus("n2", "H100"), c])
    assert kt.placements(s) == {"a-0": "n2"}
    assert s.plugins.plugin("dynamicresources").allocation("default", "c").devices == (
        ("gpu", (DRIVER, "n2", "gpu-0")),)


def test_capacity_quantities_compare_through_their_methods():
    c = claim("c", selectors=['device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0'])
    s = run(NODES, [kt.job("a", tasks=[pod("a-0", c)])], [gpus("n1", "A", memory="24Gi"), gpus("n2", "A"), c])
    assert kt.placements(s) == {"a-0": "n2"}


def test_a_device_of_another_driver_does_not_match_the_class():
    other = ResourceSlice("nic", "nic.example.com", "n1", (Device("nic-0"),), node="n1")
    c = claim("c")
    s = run(NODES[:1], [kt.job("a", tasks=[pod("a-0", c)])], [other, c])
    assert kt.placements(s) == {}
    expected = "claim default/c request gpu: no device of class gpu.example.com on the node matches"
    assert expected in kt.fit_error(s, "a-0")


def test_a_selector_failing_on_a_missing_attribute_is_named_in_the_fit_error():
    c = claim("c", selectors=['device.attributes["gpu.example.com"].family == "x"'])
    s = run(NODES[:1], [kt.job("a", tasks=[pod("a-0", c)])], [gpus("n1", "A"), c])
    assert kt.placements(s) == {}
    assert "failed on device gpu-0" in kt.fit_error(s, "a-0")


def test_a_selector_that_does_not_compile_keeps_the_pod_pending_with_the_reason():
    c = claim("c", selectors=["device.driver == "])
    s = run(NODES[:1], [kt.job("a", tasks=[pod("a-0", c)])], [gpus("n1", "A"), c])
    assert kt.placements(s) == {}
    assert "does not compile" in kt.fit_error(s, "a-0")


def test_each_selector_is_compiled_once_per_session():
    c1, c2 = claim("c1"), claim("c2")
    s = run(NODES, [kt.job("a", tasks=[pod("a-0", c1)]), kt.job("b", tasks=[pod("b-0", c2)])],
            [gpus("n1", "A", "A"), gpus("n2", "A"), c1, c2])
    assert set(kt.placements(s)) == {"a-0", "b-0"}
    plugin = s.plugins.plugin("dynamicresources")
    assert list(plugin.selectors.programs) == [GPU_CLASS.selectors[0]]
    # one verdict per device, whatever the number of pods and nodes tried
    assert len(plugin.selectors.verdicts) == 3


# --- counts, All, admin access ---------------------------------------------------------------------------


def test_counts_are_met_from_free_devices_only():
    claims = [claim(f"c{i}", count=2) for i in range(3)]
    jobs = [kt.job(f"j{i}", tasks=[pod(f"j{i}-0", c)], creation=float(i)) for i, c in enumerate(claims)]
    s = run(NODES[:1], jobs, [gpus("n1", "A", "A", "A", "A"), *claims])
    assert kt.placements(s) == {"j0-0": "n1", "j1-0": "n1"}
    assert "needs 2 devices of class gpu.example.com, 4 match on the node and 0 of them are free" in kt.fit_error(
        s, "j2-0")


def test_all_mode_takes_every_matching_device_and_needs_them_all_free():
    every, one = claim("every", mode=ALL), claim("one")
    s = run(NODES[:1], [kt.job("a", tasks=[pod("a-0", every)]), kt.job("b", tasks=[pod("b-0", one)], creation=1.0)],
            [gpus("n1", "A", "A"), every, one])
    assert kt.placements(s) == {"a-0": "n1"}
    assert len(s.plugins.plugin("dynamicresources").allocation("default", "every").devices) == 2
    s = run(NODES[:1], [kt.job("b", tasks=[pod("b-0", one)]), kt.job("a", tasks=[pod("a-0", every)], creation=1.0)],
            [gpus("n1", "A", "A"), every, one])
    assert kt.placements(s) == {"b-0": "n1"}
    assert "asks for all 2 matching devices, 1 of them in use" in kt.fit_error(s, "a-0")


def test_admin_access_takes_a_device_in_use_from_no_one():
    held = claim("held", allocation=Allocation((("gpu", (DRIVER, "n1", "gpu-0")),), "n1"), reserved_for=("x",))
    admin, plain = claim("admin", admin=True), claim("plain")
    s = run(NODES[:1], [kt.job("a", tasks=[pod("a-0", admin)]), kt.job("b", tasks=[pod("b-0", plain)], creation=1.0)],
            [gpus("n1", "A"), held, admin, plain])
    assert kt.placements(s) == {"a-0": "n1"}
    assert "b-0" not in kt.placements(s)


def test_two_requests_of_a_pod_never_share_a_device_and_the_search_backtracks():
    # the first request may take either device, the second only the H100: the first must leave it
    c = ResourceClaim("default", "c", (
        DeviceRequest("any", "gpu.example.com"),
        DeviceRequest("h100", "gpu.example.com", ('device.attributes["gpu.example.com"].model == "H100"',)),
    ), labels={QUEUE_LABEL: "default"})
    s = run(NODES[:1], [kt.job("a", tasks=[pod("a-0", c)])], [gpus("n1", "H100", "A100"), c])
    assert kt.placements(s) == {"a-0": "n1"}
    devices = dict(s.plugins.plugin("dynamicresources").allocation("default", "c").devices)
    assert devices == {"any": (DRIVER, "n1", "gpu-1"), "h100": (DRIVER, "n1", "gpu-0")}


# --- where devices are ---------------------------------------------------------------------------------


def test_network_attached_slices_serve_the_nodes_they_reach():
    zone = (NodeSelectorTerm((LabelRequirement("zone", "In", ("b",)),)),)
    net = ResourceSlice("net", DRIVER, "fabric", (Device("gpu-0"),), node_selector=zone)
    c = claim("c")
    s = run([kt.node("n1", labels={"zone": "a"}), kt.node("n2", labels={"zone": "b"})],
            [kt.job("a", tasks=[pod("a-0", c)])], [net, c])
    assert kt.placements(s) == {"a-0": "n2"}
    everywhere = ResourceSlice("all", DRIVER, "fabric", (Device("gpu-0"),), all_nodes=True)
    s = run(NODES, [kt.job("a", tasks=[pod("a-0", c)])], [everywhere, c])
    assert kt.placements(s) and s.plugins.plugin("dynamicresources").allocation("default", "c").node is None


def test_an_allocated_claim_is_honoured_as_is():
    c = claim("c", allocation=Allocation((("gpu", (DRIVER, "n2", "gpu-0")),), "n2"))
    s = run(NODES, [kt.job("a", tasks=[pod("a-0", c)])], [gpus("n1", "A"), gpus("n2", "A"), c])
    assert kt.placements(s) == {"a-0": "n2"}


def test_a_shared_claim_is_allocated_once_and_brings_its_pods_together():
    shared = claim("shared")
    s = run(NODES, [kt.job("a", tasks=[pod("a-0", shared), pod("a-1", shared)])],
            [gpus("n1", "A"), gpus("n2", "A"), shared])
    placed = kt.placements(s)
    assert set(placed) == {"a-0", "a-1"} and len(set(placed.values())) == 1
    plugin = s.plugins.plugin("dynamicresources")
    assert len(plugin.ledger.in_use) == 1
    assert plugin.ledger.holders["default/shared"] == {"default/a-0", "default/a-1"}


def test_missing_claims_and_device_classes_keep_the_pod_pending_before_any_node():
    c = claim("c", device_class="nope")
    missing = kt.task("m-0", resource_claims=(PodResourceClaim("gpu", "absent"),))
    template = kt.task("t-0", resource_claims=(PodResourceClaim("gpu", "", template="tpl"),))
    s = run(NODES, [kt.job("a", tasks=[pod("a-0", c)]), kt.job("m", tasks=[missing]), kt.job("t", tasks=[template])],
            [gpus("n1", "A"), c])
    assert kt.placements(s) == {}
    assert "device class nope does not exist for claim default/c request gpu" in kt.fit_error(s, "a-0")
    assert "resource claim default/absent does not exist" in kt.fit_error(s, "m-0")
    assert "resource claim template default/tpl does not exist" in kt.fit_error(s, "t-0")


# --- the ledger -----------------------------------------------------------------------------------------


def test_a_discarded_statement_gives_the_devices_back_and_a_placed_again_pod_gets_its_devices():
    c = claim("c")
    session, plugin = opened(NODES[:1], [kt.job("a", tasks=[pod("a-0", c)])], [gpus("n1", "A", "A"), c])
    task = next(iter(session.jobs.values())).tasks["a-0"]
    stmt = Statement(session)
    stmt.allocate(task, "n1")
    assert plugin.ledger.in_use == {(DRIVER, "n1", "gpu-0"): "default/c"}
    stmt.discard()
    assert plugin.ledger.in_use == {} and plugin.ledger.allocations == {}


def test_rolling_back_an_eviction_restores_the_victims_devices():
    c = claim("c", allocation=Allocation((("gpu", (DRIVER, "n1", "gpu-1")),), "n1"), reserved_for=("default/v-0",))
    victim = pod("v-0", c, status=TaskStatus.RUNNING, node="n1")
    session, plugin = opened(NODES[:1], [kt.job("v", tasks=[victim])], [gpus("n1", "A", "A"), c])
    before = dict(plugin.ledger.in_use)
    stmt = Statement(session)
    stmt.evict(victim, "preempted")
    assert plugin.ledger.in_use == {}
    stmt.discard()
    assert plugin.ledger.in_use == before == {(DRIVER, "n1", "gpu-1"): "default/c"}


def test_no_claims_no_work():
    session = Session(kt.cluster(NODES, jobs=[kt.job("a")]), kt.plugin_manager(list(PLUGINS))).open()
    plugin = session.plugins.plugin("dynamicresources")
    for hook in ("kai_predicate", "kai_pre_predicate", "kai_on_allocate", "kai_on_deallocate"):
        assert all(getattr(fn, "__self__", None) is not plugin for fn in getattr(session.calls, hook))


# --- quota, gangs, preemption ----------------------------------------------------------------------------


def test_dra_gpus_count_for_the_queue_and_the_cluster():
    claims = [claim(f"c{i}", labels={QUEUE_LABEL: "q"}) for i in range(3)]
    q = kt.queue("q", deserved_gpus=2, limit_gpus=2)
    jobs = [kt.job(f"j{i}", queue="q", tasks=[pod(f"j{i}-0", c)], creation=float(i)) for i, c in enumerate(claims)]
    s = run(NODES[:1], jobs, [gpus("n1", "A", "A", "A", "A"), *claims], queues=[q])
    assert kt.placements(s) == {"j0-0": "n1", "j1-0": "n1"}
    assert "j2-0" not in kt.placements(s)
    session, _ = opened(NODES, [], [gpus("n1", "A", "A"), gpus("n2", "A")])
    assert cluster_capacity(session)[2] == 3


def test_dra_and_device_plugin_gpus_share_one_fair_share():
    c = claim("c")
    q = kt.queue("q", deserved_gpus=1, limit_gpus=1)
    jobs = [kt.job("plain", queue="q", gpus=1), kt.job("d", queue="q", tasks=[pod("d-0", c)], creation=1.0)]
    s = run([kt.node("n1", gpus=1)], jobs, [gpus("n1", "A"), c], queues=[q])
    assert kt.placements(s) == {"plain-0": "n1"}


@pytest.mark.parametrize(("devices", "placed"), [(2, 0), (3, 3)])
def test_a_gang_of_dra_pods_is_placed_all_or_nothing(devices, placed):
    claims = [claim(f"c{i}") for i in range(3)]
    s = run(NODES[:1], [kt.job("g", tasks=[pod(f"g-{i}", c) for i, c in enumerate(claims)])],
            [gpus("n1", *["A"] * devices), *claims])
    assert len(kt.placements(s)) == placed
    assert len(s.plugins.plugin("dynamicresources").ledger.in_use) == placed


def test_a_higher_priority_dra_pod_preempts_and_takes_the_victims_device():
    held = claim("held", allocation=Allocation((("gpu", (DRIVER, "n1", "gpu-0")),), "n1"),
                 reserved_for=("default/low-0",))
    wanted = claim("wanted")
    low = kt.job("low", tasks=[pod("low-0", held, status=TaskStatus.RUNNING, node="n1")], priority=50)
    high = kt.job("high", tasks=[pod("high-0", wanted)], priority=100, creation=1.0)
    s = run(NODES[:1], [low, high], [gpus("n1", "A"), held, wanted], actions=("allocate", "preempt"),
            queues=[kt.queue("default", deserved_gpus=4)])
    assert kt.placements(s, "evict") == {"low-0": "n1"}
    assert kt.placements(s, "pipeline") == {"high-0": "n1"}
    plugin = s.plugins.plugin("dynamicresources")
    assert plugin.allocation("default", "wanted").devices == (("gpu", (DRIVER, "n1", "gpu-0")),)
    assert plugin.allocation("default", "held") is None


def test_in_the_default_plugin_list_at_kais_position():
    from kai.framework.config import DEFAULT_CONFIG, KAI_DEFAULT_PLUGINS

    names = [p.name for p in DEFAULT_CONFIG.plugins]
    assert names.index("nominatednode") < names.index("dynamicresources") < names.index("nodeplacement")
    assert KAI_DEFAULT_PLUGINS.index("dynamicresources") > KAI_DEFAULT_PLUGINS.index("nominatednode")
    assert isinstance(PluginSpec("dynamicresources"), PluginSpec)


# --- DRA-backed extended resources (KEP-5004) ---------------------------------------------------------------


BACKING = DeviceClass("gpu.example.com", GPU_CLASS.selectors, extended_resource_name="nvidia.com/gpu")


def gpu_pod(name, gpus=1, **request):
    containers = (ContainerRequest({"cpu": 100.0}, name="sidecar"), ContainerRequest({"nvidia.com/gpu": gpus},
                                                                                      name="main"))
    return kt.task(name, request=ResourceRequest(cpu=100, memory=1e6, gpus=gpus, **request), containers=containers)


def test_a_gpu_pod_on_a_node_whose_gpus_only_dra_publishes_gets_an_implicit_claim():
    nodes = [kt.node("dra"), kt.node("plugin", gpus=1)]
    s = run(nodes, [kt.job("a", tasks=[gpu_pod("a-0", 2)]), kt.job("b", tasks=[gpu_pod("b-0", 2)], creation=1.0)],
            [BACKING, gpus("dra", "A", "A", "A"), gpus("plugin", "A")])
    assert s.snapshot.dra.extended_gpu_nodes == {"dra": "gpu.example.com"}  # "plugin" has nvidia.com/gpu of its own
    assert next(n for n in s.snapshot.nodes if n.name == "dra").allocatable.gpu == 3
    assert kt.placements(s) == {"a-0": "dra"}
    task = next(d.task for d in s.decisions)
    extended = task.extended_claim
    assert [(r.name, r.device_class, r.count) for r in extended.claim.requests] == [
        ("container-1-request-0", "gpu.example.com", 2)]
    assert extended.mappings == (("main", "nvidia.com/gpu", "container-1-request-0"),)
    assert len(extended.allocation.devices) == 2 and extended.allocation.node == "dra"
    # the third device is left: two more GPUs do not fit, by the node's GPUs and by its devices
    assert kt.fit_error(s, "b-0") is not None
    # the cluster counts the DRA node's devices once, as its nvidia.com/gpu (3), and the other node's GPU and
    # its slice's device as before (1 + 1)
    assert cluster_capacity(s)[2] == 5


def test_a_discarded_placement_gives_the_implicit_claims_devices_back_and_sharing_does_not_fit():
    session, plugin = opened([kt.node("dra")], [kt.job("a", tasks=[gpu_pod("a-0")]),
                                                kt.job("f", tasks=[gpu_pod("f-0", 0, gpu_fraction=0.5)])],
                             [BACKING, gpus("dra", "A")])
    jobs = {j.name: j for j in session.jobs.values()}
    task = jobs["a"].tasks["a-0"]
    statement = Statement(session)
    statement.allocate(task, "dra")
    assert task.extended_claim is not None and len(plugin.ledger.in_use) == 1
    statement.discard()
    assert task.extended_claim is None and not plugin.ledger.in_use
    shared = jobs["f"].tasks["f-0"]
    reject = plugin.kai_predicate(session, shared, jobs["f"], session.node_by_name["dra"])
    assert "GPU sharing is not supported" in reject.reason


def test_nodes_are_looked_at_one_by_one_for_a_gpu_pod_when_some_node_publishes_its_gpus_through_dra_only():
    session, plugin = opened([kt.node("dra"), kt.node("plugin", gpus=1)],
                             [kt.job("a", tasks=[gpu_pod("a-0")]), kt.job("c", tasks=[kt.task("c-0")])],
                             [BACKING, gpus("dra", "A")])
    jobs = {j.name: j for j in session.jobs.values()}
    assert plugin.kai_nodes_alike(session, jobs["a"].tasks["a-0"], jobs["a"]) is False
    assert plugin.kai_nodes_alike(session, jobs["c"].tasks["c-0"], jobs["c"]) is True


# --- KAI's queue label on shared GPU claims -----------------------------------------------------------


@pytest.mark.parametrize(("labels", "why"), [
    ({}, "has no queue label kai.scheduler/queue"),
    ({QUEUE_LABEL: "other"}, "has queue label kai.scheduler/queue=other, not the pod's queue default"),
])
def test_a_named_gpu_claim_without_the_pods_queue_label_keeps_the_pod_pending(labels, why):
    c = claim("c", labels=labels)
    s = run(NODES[:1], [kt.job("a", tasks=[pod("a-0", c)])], [gpus("n1", "A"), c])
    assert kt.placements(s) == {}
    assert why in (kt.fit_error(s, "a-0") or "")


def test_the_queue_label_is_not_asked_of_a_template_claim_nor_of_a_claim_of_another_device_class():
    generated = claim("a-0-gpu", labels={}, from_template=True)
    other = ResourceClaim("default", "nic", (DeviceRequest("nic", "nic.example.com"),))
    task = pod("a-0", generated, other)
    task.resource_claims = (PodResourceClaim("gpu", "a-0-gpu", "gpu-template"), PodResourceClaim("nic", "nic"))
    nics = ResourceSlice("n1-nic", "nic.example.com", "n1", (Device("nic-0"),), node="n1")
    s = run(NODES[:1], [kt.job("a", tasks=[task])],
            [GPU_CLASS, DeviceClass("nic.example.com"), gpus("n1", "A"), nics, generated, other])
    assert kt.placements(s) == {"a-0": "n1"}


def test_init_containers_reuse_the_containers_devices_of_the_implicit_claim():
    """Kubernetes asks the larger of a pod's init and regular containers' GPUs, not their sum (KAI's
    "aggregates init-container GPU requests correctly (max, not sum)")."""
    containers = (ContainerRequest({"nvidia.com/gpu": 3}, init=True, name="init"),
                  ContainerRequest({"cpu": 100.0, "nvidia.com/gpu": 3}, name="main"))
    pod = kt.task("a-0", request=ResourceRequest(cpu=100, memory=1e6, gpus=3), containers=containers)
    s = run([kt.node("dra")], [kt.job("a", tasks=[pod])], [BACKING, gpus("dra", "A", "A", "A")])
    assert kt.placements(s) == {"a-0": "dra"}
    extended = next(d.task for d in s.decisions).extended_claim
    assert [(r.name, r.count) for r in extended.claim.requests] == [("container-1-request-1", 3)]
    assert extended.mappings == (("main", "nvidia.com/gpu", "container-1-request-1"),
                                 ("init", "nvidia.com/gpu", "container-1-request-1"))


def test_init_containers_ask_only_what_later_containers_do_not_cover_in_one_request_the_largest():
    containers = (ContainerRequest({"nvidia.com/gpu": 2}, init=True, name="i0"),
                  ContainerRequest({"nvidia.com/gpu": 4}, init=True, name="i1"),
                  ContainerRequest({"nvidia.com/gpu": 1}, init=True, sidecar=True, name="side"),
                  ContainerRequest({"nvidia.com/gpu": 1}, name="main"))
    requests, mappings = implicit_requests(containers, "nvidia.com/gpu")
    assert requests == [("container-1-request-0", 2), ("container-2-request-0", 1), ("container-3-request-0", 1)]
    assert mappings == [("side", "container-2-request-0"), ("main", "container-3-request-0"),
                        ("i0", "container-2-request-0"), ("i0", "container-3-request-0"),
                        ("i1", "container-2-request-0"), ("i1", "container-3-request-0"),
                        ("i1", "container-1-request-0")]
