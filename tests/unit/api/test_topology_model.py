"""The Topology model and the snapshot's checks of topologies and subgroup trees."""

from kai import testing as kt
from kai.api import PodSet, SubGroup, Topology

ZONE, RACK = "topology.kubernetes.io/zone", "topology.kubernetes.io/rack"


def test_domains_are_named_by_the_values_of_every_wider_level():
    t = Topology("dc", (ZONE, RACK))
    assert t.domains({ZONE: "z1", RACK: "r1", "other": "x"}) == ("z1", "z1.r1")
    assert t.domains({ZONE: "z2", RACK: "r1"}) == ("z2", "z2.r1")
    # A node lacking a level is outside the topology.
    assert t.domains({RACK: "r1"}) is None


def test_topologies_breaking_the_crd_rules_are_problems_and_left_out():
    good = Topology("good", (ZONE, RACK, "kubernetes.io/hostname"))
    bad = [Topology("none", ()), Topology("twice", (RACK, RACK)),
           Topology("host-first", ("kubernetes.io/hostname", RACK)),
           Topology("deep", tuple(f"l{i}" for i in range(17)))]
    snap = kt.cluster(topologies=[good, *bad, Topology("good", (ZONE,))])
    assert list(snap.topologies) == ["good"]
    assert snap.topologies["good"].levels == good.levels
    found = {(p.name, p.reason) for p in snap.problems}
    assert found == {("none", "InvalidTopology"), ("twice", "InvalidTopology"), ("host-first", "InvalidTopology"),
                     ("deep", "InvalidTopology"), ("good", "DuplicateTopology")}
    assert "listed twice" in next(p.message for p in snap.problems if p.name == "twice")


def test_a_job_whose_subgroup_tree_cannot_be_walked_is_a_problem_and_left_out():
    def job(name, subgroups, parent):
        j = kt.job(name, tasks=[kt.task(f"{name}-0", pod_set="leaf")])
        j.subgroups = subgroups
        j.pod_sets = {"leaf": PodSet("leaf", 1, parent)}
        return j

    ok = job("ok", {"a": SubGroup("a"), "b": SubGroup("b", "a")}, "b")
    orphan = job("orphan", {"a": SubGroup("a", "gone")}, "a")
    cycle = job("cycle", {"a": SubGroup("a", "b"), "b": SubGroup("b", "a")}, "a")
    lost = job("lost", {}, "nowhere")
    snap = kt.cluster(jobs=[ok, orphan, cycle, lost])
    assert list(snap.jobs) == ["default/ok"]
    messages = {p.name: p.message for p in snap.problems if p.reason == "InvalidSubGroups"}
    assert set(messages) == {"orphan", "cycle", "lost"}
    assert "'gone'" in messages["orphan"] and "cycle" in messages["cycle"] and "'nowhere'" in messages["lost"]
