"""The topology plugin: required and preferred levels on jobs, subgroups and pod sets; bad constraints."""

from kai import hookimpl
from kai import testing as kt
from kai.api import PodSet, ResourceRequest, Topology, TopologyConstraint

ZONE, RACK = "zone", "rack"
DC = Topology("dc", (ZONE, RACK))


def rack_node(name, zone, rack, gpus=2):
    return kt.node(name, gpus=gpus, labels={ZONE: zone, RACK: rack})


def constrained(job, required=None, preferred=None, topology="dc"):
    job.topology = TopologyConstraint(topology, required, preferred)
    return job


def run(nodes, jobs, plugins=None):
    return kt.run(kt.cluster(nodes=nodes, jobs=jobs, topologies=[DC]), plugins)


def message(session, name):
    return session.job_fit_message(session.jobs[f"default/{name}"])


def test_required_level_keeps_the_gang_inside_one_rack():
    nodes = [rack_node("a1", "z1", "r1"), rack_node("a2", "z1", "r1"), rack_node("b1", "z1", "r2"),
             rack_node("b2", "z1", "r2")]
    busy = kt.job("busy", gpus=1, status="Running", node="a1")
    # Binpack alone would fill a1 first (the least free node) and spill into rack r2.
    free = run(nodes, [busy, kt.job("j", tasks=4, gpus=1)])
    assert sorted(kt.placements(free).values()) == ["a1", "a2", "a2", "b1"]

    busy = kt.job("busy", gpus=1, status="Running", node="a1")
    session = run(nodes, [busy, constrained(kt.job("j", tasks=4, gpus=1), required=RACK)])
    assert sorted(kt.placements(session).values()) == ["b1", "b1", "b2", "b2"]


def test_required_level_leaves_a_fragmented_gang_pending_with_kai_reasons():
    nodes = [rack_node(f"n{i}", "z1", f"r{i}") for i in range(3)]
    session = run(nodes, [constrained(kt.job("j", tasks=3, gpus=1), required=RACK)])
    assert session.decisions == []
    assert message(session, "j") == (
        "Unable to schedule podgroup: node-group z1.r0 can allocate only 2 of 3 required pods. \n"
        "node-group z1.r1 can allocate only 2 of 3 required pods. \n"
        "node-group z1.r2 can allocate only 2 of 3 required pods. \n"
        "topology dc, requirement rack couldn't be satisfied for job <default/j>.")
    assert session.job_fit_detail(session.jobs["default/j"]) == (
        "\nUnable to schedule podgroup."
        "\n<z1.r0>: node-group z1.r0 can allocate only 2 of 3 required pods."
        "\n<z1.r1>: node-group z1.r1 can allocate only 2 of 3 required pods."
        "\n<z1.r2>: node-group z1.r2 can allocate only 2 of 3 required pods."
        "\ntopology dc, requirement rack couldn't be satisfied for job <default/j>.")


def test_mixed_requests_are_measured_by_resources_and_named_per_subgroup():
    nodes = [rack_node("a1", "z1", "r1", gpus=1), rack_node("b1", "z1", "r2", gpus=1)]
    tasks = [kt.task("j-0", request=ResourceRequest(cpu=1000, memory=1e9, gpus=2), pod_set="w"),
             kt.task("j-1", pod_set="w")]
    job = kt.job("j", tasks=tasks)
    job.pod_sets = {"w": PodSet("w", 2, None, TopologyConstraint("dc", required_level=RACK))}
    session = run(nodes, [job])
    assert session.decisions == []
    detail = session.job_fit_detail(session.jobs["default/j"])
    # One task asks for GPUs and one does not: domains are measured by summed resources, not pods.
    assert "\n<z1.r1>: subgroup w: z1.r1 didn't have enough resource: GPUs, requested: 2, available: 1." in detail
    assert "couldn't be satisfied for job <default/j>, subgroup w" in detail
    assert "2 node-group(s) didn't have enough resources: GPUs" in message(session, "j")


def test_the_whole_topology_too_small_names_the_search_area():
    nodes = [rack_node("n0", "z1", "r1"), rack_node("n1", "z1", "r2")]
    session = run(nodes, [constrained(kt.job("j", tasks=5, gpus=1), required=RACK)])
    assert session.decisions == []
    assert message(session, "j") == ("PodSchedulingErrors: topology dc, requirement rack couldn't be satisfied for "
                                     "job <default/j>: not enough resources in z1 to allocate the job.")


def test_preferred_level_packs_into_one_rack_when_it_can_and_spreads_when_it_cannot():
    nodes = [rack_node("a1", "z1", "r1"), rack_node("b1", "z1", "r2"), rack_node("b2", "z1", "r2")]
    busy = kt.job("busy", gpus=1, status="Running", node="b1")
    session = run(nodes, [busy, constrained(kt.job("j", tasks=2, gpus=1), preferred=RACK)])
    # r1 and r2 both hold the pair; r1 is the tighter fit, so the search offers it first.
    assert kt.placements(session) == {"j-0": "a1", "j-1": "a1"}

    busy = kt.job("busy", gpus=1, status="Running", node="b1")
    session = run(nodes, [busy, constrained(kt.job("j", tasks=4, gpus=1), preferred=RACK)])
    # No rack holds four: the zone does, and the roomier rack r2 scores higher, so it takes the most.
    assert sorted(kt.placements(session).values()) == ["a1", "b1", "b2", "b2"]


def test_preferred_level_scores_roomier_domains_higher_in_steps_of_10000():
    nodes = [rack_node("a1", "z1", "r1", gpus=1), rack_node("b1", "z1", "r2", gpus=2),
             rack_node("c1", "z1", "r3", gpus=2)]
    seen = []

    class Spy:
        @hookimpl
        def kai_node_scores(self, session, task, nodes):
            seen.append(dict(session.plugins.plugin("topology").scores))

    snap = kt.cluster(nodes=nodes, jobs=[constrained(kt.job("j", tasks=4, gpus=1), preferred=RACK)],
                      topologies=[DC])
    session = kt.run(snap, ["topology", "spy"], extra_plugins={"spy": lambda a: Spy()})
    # No rack holds four, the zone does. Its racks in packing order (tightest first, ties by id) r1, r2, r3
    # score 3, 6 and 10 steps of 10000; the job's root group (named "") holds them.
    assert seen[0] == {"": {"a1": 30000.0, "b1": 60000.0, "c1": 100000.0}}
    assert sorted(kt.placements(session).values()) == ["b1", "b1", "c1", "c1"]


def test_nodes_lacking_a_level_are_outside_the_topology():
    nodes = [rack_node("a1", "z1", "r1", gpus=1), kt.node("loose", gpus=8, labels={ZONE: "z1"})]
    session = run(nodes, [constrained(kt.job("j", tasks=2, gpus=1), required=ZONE)])
    assert session.decisions == []
    unconstrained = run(nodes, [kt.job("j", tasks=2, gpus=1)])
    assert sorted(kt.placements(unconstrained).values()) == ["a1", "loose"]


def test_running_tasks_pin_the_required_domain_of_later_steps():
    def elastic():
        j = kt.job("e", tasks=[kt.task("e-0", gpus=1, status="Running", node="b1"), kt.task("e-1", gpus=1)],
                   min_available=1)
        return constrained(j, required=RACK)

    nodes = [rack_node("a1", "z1", "ra", gpus=1), rack_node("b1", "z1", "rb", gpus=2)]
    session = run(nodes, [elastic()])
    assert kt.placements(session) == {"e-1": "b1"}
    # Without the running task, equal fits go to the first domain by id: rack ra.
    fresh = run(nodes, [constrained(kt.job("e", tasks=1, gpus=1), required=RACK)])
    assert kt.placements(fresh) == {"e-0": "a1"}


def test_a_missing_topology_or_level_leaves_the_group_unschedulable_with_the_reason():
    nodes = [rack_node("a1", "z1", "r1")]
    session = run(nodes, [constrained(kt.job("j", gpus=1), required=RACK, topology="nope")])
    assert session.decisions == [] and message(session, "j") == (
        "PodSchedulingErrors: Requested topology nope does not exist.")

    session = run(nodes, [constrained(kt.job("j", gpus=1), required="row")])
    assert session.decisions == []
    assert message(session, "j") == ("PodSchedulingErrors: topology constraint error: workload specified 'row' as "
                                     "the required topology constraint level, but the topology tree 'dc' does not "
                                     "contain a level with this name.")

    session = run(nodes, [constrained(kt.job("j", gpus=1), required=RACK, preferred=ZONE)])
    assert "preferred topology constraint level, but it is wider than the required level 'rack'" in message(
        session, "j")
    session = run(nodes, [constrained(kt.job("j", gpus=1))])
    assert "neither a required nor a preferred level" in message(session, "j")


def test_jobs_without_constraints_are_untouched_by_the_plugin():
    nodes = [rack_node("a1", "z1", "r1"), rack_node("b1", "z1", "r2")]
    with_plugin = run(nodes, [kt.job("j", tasks=3, gpus=1)])
    without = kt.run(kt.cluster(nodes=nodes, jobs=[kt.job("j", tasks=3, gpus=1)]),
                     [p.name for p in kt.DEFAULT_CONFIG.plugins if p.name != "topology"])
    assert kt.placements(with_plugin) == kt.placements(without)
    assert with_plugin.plugins.plugin("topology").scores == {}


def test_shared_gpu_tasks_count_the_shared_devices_they_fit_on():
    half = ResourceRequest(cpu=1000, memory=1e9, gpu_fraction=0.5)
    running = kt.job("r", tasks=[kt.task("r-0", request=half, status="Running", node="a1", gpu_groups=("g1",))])
    pending = constrained(kt.job("j", tasks=[kt.task("j-0", request=half)]), required=RACK)
    nodes = [rack_node("a1", "z1", "r1", gpus=1), rack_node("b1", "z1", "r2", gpus=0)]
    session = run(nodes, [running, pending])
    # a1 has no free whole device, but its shared device has room for the half: rack r1 holds the job.
    assert kt.placements(session) == {"j-0": "a1"}
