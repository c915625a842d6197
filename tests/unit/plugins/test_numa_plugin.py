"""The ``numa`` plugin: each Topology Manager policy and scope, scoring, and the per-zone ledger through statements."""

from __future__ import annotations

import pytest

from kai import testing as kt
from kai.api import GPU, ContainerRequest, NumaTopology, NumaZone, TaskStatus, ZonePlacement
from kai.framework import PluginError, PluginSpec, Session
from kai.plugins.numa import NOT_ALIGNED, SCORE, build

G = "Guaranteed"
RUNNING = TaskStatus.RUNNING


def topo(policy, *zones, scope="pod"):
    """Zones given as allocatable CPU millicores (and optionally GPUs: ``(cpu, gpus)``)."""
    out = []
    for i, z in enumerate(zones):
        cpu, gpus = z if isinstance(z, tuple) else (z, None)
        amounts = {"cpu": float(cpu)} | ({GPU: float(gpus)} if gpus is not None else {})
        out.append(NumaZone(f"node-{i}", amounts, dict(amounts)))
    return NumaTopology(policy, scope, tuple(out))


def numa_node(name, policy, *zones, scope="pod", gpus=0):
    return kt.node(name, gpus=gpus, numa=topo(policy, *zones, scope=scope))


def run(nodes, jobs, actions=("allocate",), plugins=("predicates", "nodeplacement", "numa")):
    return kt.run(kt.cluster(nodes, jobs=jobs), list(plugins), actions)


def zones_of(session, task_name):
    for j in session.jobs.values():
        if task_name in j.tasks:
            return [zp.zone for zp in j.tasks[task_name].numa_placement or ()]
    raise KeyError(task_name)


def opened(nodes, jobs, **arguments):
    session = Session(kt.cluster(nodes, jobs=jobs), kt.plugin_manager([PluginSpec("numa", arguments)])).open()
    return session, session.plugins.plugin("numa")


def cpu_available(plugin, node="n"):
    return [z.get("cpu") for z in plugin.zones_available(node)]


# --- policies -----------------------------------------------------------------------------------------


def test_single_numa_node_places_on_the_lowest_zone_that_holds_the_pod_and_records_it_on_the_bind():
    s = run([numa_node("n", "single-numa-node", 2000, 4000, 4000)], [kt.job("a", cpu=3000, qos_class=G)])
    assert kt.placements(s) == {"a-0": "n"}
    assert zones_of(s, "a-0") == ["node-1"]
    (bind,) = s.decisions
    assert bind.numa_zones == (ZonePlacement("node-1", {"cpu": 3000.0}),)
    assert [z["cpu"] for z in s.plugins.plugin("numa").zones_available("n")] == [2000, 1000, 4000]


def test_single_numa_node_rejects_a_pod_no_zone_holds_but_lets_a_burstable_pod_through():
    nodes = [numa_node("n", "single-numa-node", 4000, 4000)]
    s = run(nodes, [kt.job("big", cpu=6000, qos_class=G)])
    assert kt.placements(s) == {}
    assert NOT_ALIGNED in kt.fit_error(s, "big-0")
    s = run([numa_node("n", "single-numa-node", 4000, 4000)], [kt.job("big", cpu=6000, qos_class="Burstable")])
    assert kt.placements(s) == {"big-0": "n"} and zones_of(s, "big-0") == []


def test_restricted_admits_the_minimal_span_and_splits_the_amounts_lowest_zone_first():
    s = run([numa_node("n", "restricted", 4000, 4000, 4000)], [kt.job("a", cpu=6000, qos_class=G)])
    (bind,) = s.decisions
    assert bind.numa_zones == (ZonePlacement("node-0", {"cpu": 4000.0}), ZonePlacement("node-1", {"cpu": 2000.0}))


def test_restricted_rejects_when_the_preferred_widths_of_the_resources_disagree():
    # CPU needs two zones, the GPU one: the kubelet's hints do not merge.
    nodes = [numa_node("n", "restricted", (4000, 1), (4000, 1), gpus=2)]
    s = run(nodes, [kt.job("a", cpu=6000, gpus=1, qos_class=G)])
    assert kt.placements(s) == {} and NOT_ALIGNED in kt.fit_error(s, "a-0")
    s = run([numa_node("n", "restricted", (4000, 1), (4000, 1), gpus=2)], [kt.job("a", cpu=3000, gpus=1, qos_class=G)])
    assert zones_of(s, "a-0") == ["node-0"]


def test_restricted_rejects_when_the_minimal_width_mask_is_taken():
    # zone 0 is mostly used: 6000 needs two zones (by allocatable) and no two zones have it available.
    busy = kt.job("busy", cpu=3000, status=RUNNING, node="n", qos_class=G,
                  numa_recorded=(ZonePlacement("node-0", {"cpu": 3000.0}),))
    s = run([numa_node("n", "restricted", 4000, 4000)], [busy, kt.job("a", cpu=6000, qos_class=G)])
    assert kt.placements(s) == {}


def test_best_effort_never_rejects_and_scores_fewer_zones_higher():
    nodes = [numa_node("a-split", "best-effort", 2000, 2000), numa_node("b-local", "best-effort", 4000, 4000)]
    s, plugin = opened(nodes, [kt.job("p", cpu=3000, qos_class=G)])
    task = s.jobs["default/p"].tasks["p-0"]
    assert [plugin.kai_predicate(s, task, None, n) for n in s.nodes] == [None, None]
    assert plugin.kai_node_scores(s, task, s.nodes) == [SCORE / 2, SCORE]
    s = run([numa_node("a-split", "best-effort", 2000, 2000), numa_node("b-local", "best-effort", 4000, 4000)],
            [kt.job("p", cpu=3000, qos_class=G)])
    assert kt.placements(s) == {"p-0": "b-local"} and zones_of(s, "p-0") == ["node-0"]


def test_policy_none_and_nodes_without_topology_are_not_filtered_and_score_their_worst_span():
    nodes = [numa_node("a", "none", 1000, 1000, 1000), kt.node("b"), numa_node("c", "single-numa-node", 4000, 4000)]
    s, plugin = opened(nodes, [kt.job("p", cpu=3000, qos_class=G)])
    task = s.jobs["default/p"].tasks["p-0"]
    assert [plugin.kai_predicate(s, task, None, n) for n in s.nodes] == [None, None, None]
    assert plugin.kai_node_scores(s, task, s.nodes) == [SCORE / 3, SCORE / 3, SCORE]


# --- what is aligned ----------------------------------------------------------------------------------


def test_container_scope_aligns_each_container_and_init_containers_alone():
    containers = (ContainerRequest({"cpu": 4000.0}, init=True), ContainerRequest({"cpu": 3000.0}),
                  ContainerRequest({"cpu": 3000.0}))
    job = kt.job("a", cpu=6000, qos_class=G, containers=containers)
    s = run([numa_node("n", "single-numa-node", 4000, 4000, scope="container")], [job])
    assert zones_of(s, "a-0") == ["node-0", "node-1"]
    # Pod scope: the pod's 6000 must fit one zone.
    job = kt.job("a", cpu=6000, qos_class=G, containers=containers)
    assert kt.placements(run([numa_node("n", "single-numa-node", 4000, 4000)], [job])) == {}
    # A native sidecar runs with the app containers: 3000 + 3000 + 3000 do not fit two zones of 4000.
    sidecar = (ContainerRequest({"cpu": 3000.0}, init=True, sidecar=True),) + containers[1:]
    job = kt.job("a", cpu=9000, qos_class=G, containers=sidecar)
    assert kt.placements(run([numa_node("n", "single-numa-node", 4000, 4000, scope="container")], [job])) == {}


def test_only_whole_cpus_of_a_guaranteed_pod_are_pinned():
    s = run([numa_node("n", "single-numa-node", 1000, 1000)], [kt.job("a", cpu=2500, qos_class=G)])
    assert kt.placements(s) == {"a-0": "n"} and zones_of(s, "a-0") == []


def test_a_burstable_pod_asking_for_a_device_the_zones_report_is_aligned_on_it():
    nodes = [numa_node("n", "single-numa-node", (4000, 1), (4000, 1), gpus=2)]
    s = run(nodes, [kt.job("a", cpu=6000, gpus=1, qos_class="Burstable")])
    (bind,) = s.decisions
    assert bind.numa_zones == (ZonePlacement("node-0", {GPU: 1.0}),)
    nodes = [numa_node("n", "single-numa-node", (4000, 1), (4000, 1), gpus=2)]
    assert kt.placements(run(nodes, [kt.job("a", gpus=2, qos_class="Burstable")])) == {}


def test_ignore_list_drops_a_resource_from_alignment():
    nodes = [numa_node("n", "single-numa-node", 4000, 4000)]
    s = run(nodes, [kt.job("a", cpu=6000, qos_class=G)],
            plugins=("predicates", PluginSpec("numa", {"ignoreList": "cpu"})))
    assert kt.placements(s) == {"a-0": "n"}


# --- the ledger -----------------------------------------------------------------------------------------


def running(name, zone, cpu=3000, **fields):
    return kt.job(name, cpu=cpu, status=RUNNING, node="n", qos_class=G,
                  numa_recorded=(ZonePlacement(zone, {"cpu": float(cpu)}),), **fields)


def test_availability_is_reconstructed_from_recorded_placements_unless_turned_off():
    node = kt.node("n", numa=NumaTopology("single-numa-node", "pod", (
        NumaZone("node-0", {"cpu": 4000.0}, {"cpu": 4000.0}), NumaZone("node-1", {"cpu": 4000.0}, {"cpu": 500.0}))))
    jobs = [running("r", "node-0"), running("unknown-zone", "node-9", cpu=1000)]
    s, plugin = opened([node], jobs)
    assert cpu_available(plugin) == [1000.0, 4000.0]
    assert s.jobs["default/r"].tasks["r-0"].numa_placement == (ZonePlacement("node-0", {"cpu": 3000.0}),)
    assert s.jobs["default/unknown-zone"].tasks["unknown-zone-0"].numa_placement == ()
    _, plugin = opened([node], [running("r", "node-0")], reconstructAvailable=False)
    assert cpu_available(plugin) == [4000.0, 500.0]


def test_the_ledger_follows_allocation_eviction_and_rollback():
    s, plugin = opened([numa_node("n", "single-numa-node", 4000, 4000)],
                       [running("victim", "node-0"), kt.job("new", cpu=3000, qos_class=G)])
    victim, new = s.jobs["default/victim"].tasks["victim-0"], s.jobs["default/new"].tasks["new-0"]
    assert cpu_available(plugin) == [1000.0, 4000.0]
    st = s.statement()
    st.allocate(new, "n")
    assert [zp.zone for zp in new.numa_placement] == ["node-1"] and cpu_available(plugin) == [1000.0, 1000.0]
    cp = st.checkpoint()
    st.evict(victim, "make room")
    assert cpu_available(plugin) == [4000.0, 1000.0]
    st.rollback(cp)
    assert cpu_available(plugin) == [1000.0, 1000.0] and victim.status is RUNNING
    st.discard()
    assert cpu_available(plugin) == [1000.0, 4000.0] and new.numa_placement == ()


def test_a_victim_moved_elsewhere_and_rolled_back_keeps_its_own_zones():
    nodes = [numa_node("n", "single-numa-node", 4000, 4000), numa_node("m", "single-numa-node", 4000, 4000)]
    s, plugin = opened(nodes, [running("victim", "node-1")])
    victim = s.jobs["default/victim"].tasks["victim-0"]
    st = s.statement()
    st.evict(victim, "moved")
    st.pipeline(victim, "m")
    assert victim.node == "m" and cpu_available(plugin, "m") == [1000.0, 4000.0]
    assert cpu_available(plugin, "n") == [4000.0, 4000.0]
    st.discard()
    assert victim.numa_placement == (ZonePlacement("node-1", {"cpu": 3000.0}),)
    assert cpu_available(plugin, "n") == [4000.0, 1000.0] and cpu_available(plugin, "m") == [4000.0, 4000.0]


def test_a_pipelined_gang_keeps_exact_zones_when_allocations_become_pipelines():
    s, plugin = opened([numa_node("n", "single-numa-node", 4000, 4000)], [kt.job("g", tasks=2, cpu=3000, qos_class=G)])
    a, b = s.jobs["default/g"].tasks.values()
    st = s.statement()
    st.allocate(a, "n")
    st.allocate(b, "n")
    st.convert_allocated_to_pipelined("default/g")
    assert {zp.zone for t in (a, b) for zp in t.numa_placement} == {"node-0", "node-1"}
    assert cpu_available(plugin) == [1000.0, 1000.0]
    assert [d.numa_zones[0].zone for d in st.commit()] == ["node-0", "node-1"]


def test_without_numa_nodes_the_plugin_leaves_the_sessions_call_lists():
    snap = kt.cluster([kt.node("n")], jobs=[kt.job("a", qos_class=G)])
    s = Session(snap, kt.plugin_manager(["predicates", "numa", "nodeavailability"])).open()
    predicates, availability = s.plugins.plugin("predicates"), s.plugins.plugin("nodeavailability")
    assert [fn.__self__ for fn in s.calls.kai_predicate] == [predicates]
    assert [fn.__self__ for fn in s.calls.kai_node_scores] == [availability]
    assert s.calls.kai_on_allocate == [] and s.calls.kai_on_deallocate == []
    with_numa = Session(kt.cluster([numa_node("n", "none", 1000)], jobs=[kt.job("a", qos_class=G)]),
                        kt.plugin_manager(["numa"])).open()
    assert len(with_numa.calls.kai_predicate) == 1 and len(with_numa.calls.kai_on_allocate) == 1


def test_inactive_without_numa_nodes():
    s, plugin = opened([kt.node("n")], [kt.job("a", qos_class=G)])
    task = s.jobs["default/a"].tasks["a-0"]
    assert plugin.kai_node_scores(s, task, s.nodes) is None
    assert plugin.kai_predicate(s, task, None, s.nodes[0]) is None
    assert plugin.zones_available("n") is None
    st = s.statement()
    st.allocate(task, "n")
    assert task.numa_placement is None
    (bind,) = st.commit()
    assert bind.numa_zones == ()


def test_arguments():
    plugin = build({"ignoreList": "nvidia.com/gpu, memory", "reconstructAvailable": "false"})
    assert (plugin.ignore, plugin.reconstruct) == (frozenset({GPU, "memory"}), False)
    assert build({"ignoreList": ["cpu"]}).ignore == frozenset({"cpu"})
    with pytest.raises(ValueError, match="reconstructAvailable"):
        build({"reconstructAvailable": "maybe"})
    with pytest.raises(PluginError, match="numa.*ignoreList"):
        kt.plugin_manager([PluginSpec("numa", {"ignoreList": 3})])


def test_not_in_the_default_configuration():
    from kai.framework.config import DEFAULT_CONFIG, KAI_DEFAULT_PLUGINS

    assert "numa" not in [p.name for p in DEFAULT_CONFIG.plugins] and "numa" not in KAI_DEFAULT_PLUGINS


def test_the_restricted_search_is_bounded_on_nodes_with_many_zones():
    from kai.plugins.numa.align import MAX_MASKS, Ledger, solve

    # 20 zones, a unit needing 10 of them; only the last 10 have its memory: mask 10..19 comes after
    # C(20, 10) - 1 others, far beyond the bound, so the node counts as unable to align it.
    zones = tuple(NumaZone(f"node-{i}", {"cpu": 1000.0, "memory": 1.0}, {"cpu": 1000.0, "memory": float(i >= 10)})
                  for i in range(20))
    ledger = Ledger(NumaTopology("restricted", "pod", zones), frozenset(), False)
    assert not solve(ledger, ledger.names, [{"cpu": 10000.0, "memory": 10.0}], [], None)
    few = tuple(NumaZone(f"node-{i}", {"cpu": 1000.0}, {"cpu": 1000.0 * (i >= 6)}) for i in range(12))
    ledger = Ledger(NumaTopology("restricted", "pod", few), frozenset(), False)
    alloc: dict = {}
    assert MAX_MASKS >= 924 and solve(ledger, ledger.names, [{"cpu": 6000.0}], [], alloc)  # C(12, 6) = 924
    assert sorted(alloc) == list(range(6, 12))
