"""Hierarchical PodGroups: a subgroup tree placed as one unit, gangs per pod set, topology per subgroup."""

from kai import testing as kt
from kai.actions.stalegangeviction import is_stale
from kai.api import Job, PodSet, SubGroup, TaskStatus, Topology, TopologyConstraint
from kai.framework.gang import tasks_to_allocate, tasks_to_evict

RACK = "rack"
RACKS = Topology("racks", (RACK,))


def dynamo(model_topology=None, job_topology=None) -> Job:
    """A disaggregated inference service: a frontend (CPU), prefill workers (min 2 of 4) and decode workers
    (min 2 of 4) under one ``model`` subgroup."""
    tasks = [kt.task("fe-0", pod_set="frontend")]
    tasks += [kt.task(f"prefill-{i}", gpus=1, pod_set="prefill") for i in range(4)]
    tasks += [kt.task(f"decode-{i}", gpus=1, pod_set="decode") for i in range(4)]
    job = kt.job("svc", tasks=tasks)
    job.subgroups = {"model": SubGroup("model", None, model_topology)}
    job.pod_sets = {"frontend": PodSet("frontend", 1), "prefill": PodSet("prefill", 2, "model"),
                    "decode": PodSet("decode", 2, "model")}
    job.topology = job_topology
    return job


def bound(session) -> list[str]:
    return sorted(kt.placements(session))


def test_the_minimum_of_every_pod_set_is_placed_as_one_unit():
    nodes = [kt.node("g1", gpus=2), kt.node("g2", gpus=2)]
    session = kt.run(kt.cluster(nodes=nodes, jobs=[dynamo()]))
    assert bound(session) == ["decode-0", "decode-1", "fe-0", "prefill-0", "prefill-1"]


def test_no_pod_set_is_placed_when_one_cannot_reach_its_minimum():
    nodes = [kt.node("g1", gpus=2), kt.node("g2", gpus=1)]
    session = kt.run(kt.cluster(nodes=nodes, jobs=[dynamo()]))
    # Three GPUs hold both decode workers (placed first: pod sets in name order) and one prefill worker --
    # but prefill needs two, so nothing is placed, not even the frontend.
    assert session.decisions == []
    assert session.job_fit_message(session.jobs["default/svc"]).startswith(
        "PodSchedulingErrors: Resources were found for 3 pods from all sub-groups while sub-group prefill requires "
        "2 pods for gang scheduling. Additional pods cannot be scheduled in this sub-group due to:")


def test_every_pod_set_grows_past_its_minimum_one_task_a_step():
    nodes = [kt.node("g1", gpus=4), kt.node("g2", gpus=4)]
    session = kt.run(kt.cluster(nodes=nodes, jobs=[dynamo()]))
    # The frontend, satisfied and with nothing left to place, must not stop prefill and decode growing.
    assert len(bound(session)) == 9


def test_a_subgroup_constraint_keeps_its_workers_in_one_rack_and_the_rest_free():
    nodes = [kt.node("cpu", cpu=8000), kt.node("a1", gpus=2, labels={RACK: "ra"}),
             kt.node("b1", gpus=2, labels={RACK: "rb"}), kt.node("b2", gpus=2, labels={RACK: "rb"})]
    within_rack = TopologyConstraint("racks", required_level=RACK)
    session = kt.run(kt.cluster(nodes=nodes, jobs=[dynamo(within_rack)], topologies=[RACKS]))
    placed = kt.placements(session)
    workers = {n for t, n in placed.items() if not t.startswith("fe")}
    # Only rack rb holds the four workers of the first step (and the growth after it stays there).
    assert workers == {"b1", "b2"} and len(workers) == 2
    assert placed["fe-0"] == "cpu"
    assert sum(1 for t in placed if not t.startswith("fe")) == 4

    # The same tree without the constraint spreads the workers over both racks (binpack fills a1 first).
    session = kt.run(kt.cluster(nodes=nodes, jobs=[dynamo()], topologies=[RACKS]))
    assert "a1" in kt.placements(session).values()


def test_a_constraint_on_the_whole_job_fails_it_as_one_unit():
    nodes = [kt.node("a1", gpus=2, labels={RACK: "ra"}), kt.node("b1", gpus=2, labels={RACK: "rb"})]
    within_rack = TopologyConstraint("racks", required_level=RACK)
    session = kt.run(kt.cluster(nodes=nodes, jobs=[dynamo(job_topology=within_rack)], topologies=[RACKS]))
    assert session.decisions == []
    assert "topology racks, requirement rack couldn't be satisfied for job <default/svc>" in (
        session.job_fit_message(session.jobs["default/svc"]))


def test_segments_each_stay_inside_one_rack():
    tasks = [kt.task("leader-0", pod_set="leader")]
    tasks += [kt.task(f"w{s}-{i}", gpus=1, pod_set=f"segment-{s}") for s in (0, 1) for i in (0, 1)]
    job = kt.job("train", tasks=tasks)
    segment = TopologyConstraint("racks", required_level=RACK)
    job.subgroups = {"workers": SubGroup("workers")}
    job.pod_sets = {"leader": PodSet("leader", 1), "segment-0": PodSet("segment-0", 2, "workers", segment),
                    "segment-1": PodSet("segment-1", 2, "workers", segment)}
    nodes = [kt.node("n1", gpus=2, labels={RACK: "r1"}), kt.node("n2", gpus=1, labels={RACK: "r2"}),
             kt.node("n3", gpus=1, labels={RACK: "r2"}), kt.node("n4", gpus=1, labels={RACK: "r3"})]
    session = kt.run(kt.cluster(nodes=nodes, jobs=[job], topologies=[RACKS]))
    placed = kt.placements(session)
    rack = {n.name: n.labels[RACK] for n in nodes}
    assert len(placed) == 5
    for s in (0, 1):
        assert rack[placed[f"w{s}-0"]] == rack[placed[f"w{s}-1"]]
    assert "n4" not in placed.values()


# --- minSubGroup: N of M members ----------------------------------------------------------------------


def replicas(n=3, need=2, running=()):
    """A job of ``n`` replica pod sets of 2 GPU pods each, ``need`` of which must run (the root's
    ``min_subgroup``); pods named in ``running`` already run on node g1."""
    tasks = [kt.task(f"r{i}-{k}", gpus=1, pod_set=f"r{i}", status="Running" if f"r{i}-{k}" in running else "Pending",
                     node="g1" if f"r{i}-{k}" in running else None) for i in range(n) for k in range(2)]
    job = kt.job("svc", tasks=tasks, priority=5)
    job.pod_sets = {f"r{i}": PodSet(f"r{i}", 2) for i in range(n)}
    job.min_subgroup = need
    return job


def test_min_subgroup_places_only_the_members_it_needs_as_the_gang():
    session = kt.run(kt.cluster(nodes=[kt.node("g1", gpus=4)], jobs=[replicas()]))
    assert bound(session) == ["r0-0", "r0-1", "r1-0", "r1-1"]


def test_min_subgroup_job_runs_when_only_that_many_members_fit_and_is_not_ready_below_it():
    job = replicas()
    assert job.is_ready()
    session = kt.run(kt.cluster(nodes=[kt.node("g1", gpus=5)], jobs=[replicas()]))
    # Four GPUs for the two members it needs; a further member is added whole (its own gang of 2), not in part.
    assert bound(session) == ["r0-0", "r0-1", "r1-0", "r1-1"]
    session = kt.run(kt.cluster(nodes=[kt.node("g1", gpus=6)], jobs=[replicas()]))
    assert len(bound(session)) == 6
    gated = replicas()
    for t in gated.tasks.values():
        if not t.name.startswith("r0"):
            t.status = TaskStatus.GATED
    assert not gated.is_ready()


def test_a_member_short_of_its_gang_is_passed_over_for_one_that_fills_its_own():
    # KAI after v0.17 (#2096, the gang admission floor): r0 has one pod of its two, so the step takes r1 and r2
    # whole instead of r0's lone pod beside r1 (a step that could never satisfy the job).
    job = replicas()
    del job.tasks[next(uid for uid, t in job.tasks.items() if t.name == "r0-1")]
    assert job.is_ready()
    session = kt.run(kt.cluster(nodes=[kt.node("g1", gpus=4)], jobs=[job]))
    assert bound(session) == ["r1-0", "r1-1", "r2-0", "r2-1"]


def test_a_step_gives_a_gang_whole_or_not_at_all_but_victims_are_put_back_as_they_are():
    job = kt.job("j", tasks=[kt.task("j-0"), kt.task("j-1", status="Running", node="n1"), kt.task("j-2")],
                 min_available=4)
    session = kt.run(kt.cluster(nodes=[kt.node("n1")], jobs=[job]), actions=())
    job = session.jobs["default/j"]
    assert tasks_to_allocate(session, job) == []
    assert [t.name for t in tasks_to_allocate(session, job, admission=False)] == ["j-0", "j-2"]
    nested = replicas()
    del nested.tasks[next(uid for uid, t in nested.tasks.items() if t.name == "r0-1")]
    del nested.tasks[next(uid for uid, t in nested.tasks.items() if t.name == "r1-1")]
    session = kt.run(kt.cluster(nodes=[kt.node("g1", gpus=4)], jobs=[nested]), actions=())
    nested = session.jobs["default/svc"]
    assert tasks_to_allocate(session, nested) == []  # only r2 can fill its gang; two members are needed
    assert sorted(t.name for t in tasks_to_allocate(session, nested, admission=False)) == ["r0-0", "r1-0"]


def test_a_job_at_its_min_subgroup_is_gang_satisfied_and_not_stale():
    job = replicas(running=("r0-0", "r0-1", "r1-0", "r1-1"))
    assert job.is_gang_satisfied() and not is_stale(job)
    job = replicas(running=("r0-0", "r0-1", "r1-0"))
    assert not job.is_gang_satisfied() and is_stale(job)


def test_an_eviction_step_takes_a_surplus_member_whole_before_the_job():
    job = replicas(running=("r0-0", "r0-1", "r1-0", "r1-1", "r2-0", "r2-1"))
    session = kt.run(kt.cluster(nodes=[kt.node("g1", gpus=6)], jobs=[job]), actions=())
    tasks, more = tasks_to_evict(session, session.jobs["default/svc"])
    assert sorted(t.name for t in tasks) == ["r2-0", "r2-1"] and more
    job = replicas(running=("r0-0", "r0-1", "r1-0", "r1-1"))
    session = kt.run(kt.cluster(nodes=[kt.node("g1", gpus=6)], jobs=[job]), actions=())
    tasks, more = tasks_to_evict(session, session.jobs["default/svc"])
    assert sorted(t.name for t in tasks) == ["r0-0", "r0-1", "r1-0", "r1-1"] and not more


def test_an_optional_subgroup_with_gang_size_zero_is_grown_after_the_required_ones():
    tasks = [kt.task("w-0", gpus=1, pod_set="workers"), kt.task("w-1", gpus=1, pod_set="workers"),
             kt.task("x-0", gpus=1, pod_set="extra")]
    job = kt.job("j", tasks=tasks)
    job.pod_sets = {"extra": PodSet("extra", 0), "workers": PodSet("workers", 2)}
    session = kt.run(kt.cluster(nodes=[kt.node("g1", gpus=2)], jobs=[job]))
    assert bound(session) == ["w-0", "w-1"]


# --- topology level aliases -----------------------------------------------------------------------

def test_a_constraint_may_name_a_level_by_its_alias():
    topology = Topology("dc", ("zone", "rack"), {"rack-alias": "rack"})
    nodes = [kt.node("a1", gpus=2, labels={"zone": "z", "rack": "a"}),
             kt.node("b1", gpus=1, labels={"zone": "z", "rack": "b"}),
             kt.node("b2", gpus=1, labels={"zone": "z", "rack": "b"})]
    job = kt.job("j", tasks=2, gpus=1)
    job.topology = TopologyConstraint("dc", required_level="rack-alias")
    snap = kt.cluster(nodes=nodes, jobs=[job], topologies=[topology])
    assert snap.jobs["default/j"].topology.required_level == "rack"
    placed = kt.placements(kt.run(snap, plugins=["predicates", "topology", "nodeplacement"]))
    racks = {n.name: n.labels["rack"] for n in nodes}
    assert len(placed) == 2 and len({racks[n] for n in placed.values()}) == 1


def test_an_alias_must_name_a_level_and_not_shadow_one():
    assert Topology("dc", ("zone", "rack"), {"r": "host"}).problem() == "alias 'r' names 'host', which is not a level"
    assert Topology("dc", ("zone", "rack"), {"zone": "rack"}).problem() == "alias 'zone' is also a level's node label"
