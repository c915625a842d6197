"""Semi-preemptible jobs: the part above each pod set's gang size is preemptible, the gang (the core) is not."""

import attrs

from kai import testing as kt

PLUGINS = ["predicates", "proportion", "priority", "elastic", "taskorder", "nodeplacement"]


def _semi(name, queue, tasks, min_available, node="n1", priority=50, status="Running", **kw):
    job = kt.job(name, queue, tasks=tasks, gpus=1, min_available=min_available, priority=priority, status=status,
                 node=node, **kw)
    return attrs.evolve(job, semi_preemptible=True, preemptible=True)


def _run(snapshot, *actions):
    return kt.run(snapshot, plugins=PLUGINS, actions=actions)


def test_a_semi_preemptible_gang_above_its_minimum_loses_only_its_surplus_to_a_higher_priority_job():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=4)], queues=[kt.queue("q", deserved_gpus=4)],
                      jobs=[_semi("elastic", "q", 4, 2), kt.job("urgent", "q", tasks=2, gpus=1, priority=90)])
    session = _run(snap, "preempt")
    assert sorted(kt.placements(session, "evict")) == ["elastic-2", "elastic-3"]
    assert sorted(kt.placements(session, "pipeline")) == ["urgent-0", "urgent-1"]


def test_the_core_of_a_semi_preemptible_gang_is_never_a_victim():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=4)], queues=[kt.queue("q", deserved_gpus=4)],
                      jobs=[_semi("elastic", "q", 4, 2), kt.job("urgent", "q", tasks=3, gpus=1, priority=90)])
    session = _run(snap, "preempt")
    assert kt.placements(session, "evict") == {}  # 3 GPUs need a core pod: nothing is evicted
    assert kt.placements(session, "pipeline") == {}


def test_a_preemptible_gang_of_the_same_shape_goes_whole():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=4)], queues=[kt.queue("q", deserved_gpus=4)],
                      jobs=[kt.job("elastic", "q", tasks=4, gpus=1, min_available=2, priority=50, status="Running",
                                   node="n1"), kt.job("urgent", "q", tasks=3, gpus=1, priority=90)])
    assert len(kt.placements(_run(snap, "preempt"), "evict")) == 4


def test_the_core_is_in_quota_the_surplus_may_go_over_it():
    """Queue q deserves 2 GPUs: a semi-preemptible job of gang size 2 runs 4 pods (2 over quota), a
    non-preemptible one of 4 pods does not fit its quota."""
    nodes, queues = [kt.node("n1", gpus=8)], [kt.queue("q", deserved_gpus=2), kt.queue("other", deserved_gpus=6)]
    semi = _semi("semi", "q", 4, 2, node=None, status="Pending")
    assert len(kt.placements(_run(kt.cluster(nodes=nodes, queues=queues, jobs=[semi]), "allocate"))) == 4
    fixed = kt.job("fixed", "q", tasks=4, gpus=1, min_available=2, priority=150)
    assert len(kt.placements(_run(kt.cluster(nodes=nodes, queues=queues, jobs=[fixed]), "allocate"))) == 2
    big = _semi("big", "q", 3, 3, node=None, status="Pending")
    assert kt.placements(_run(kt.cluster(nodes=nodes, queues=queues, jobs=[big]), "allocate")) == {}


def test_reclaim_takes_the_surplus_of_a_semi_preemptible_job_over_its_quota():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=4)],
                      queues=[kt.queue("q", deserved_gpus=2), kt.queue("owed", deserved_gpus=2)],
                      jobs=[_semi("elastic", "q", 4, 2), kt.job("reclaimer", "owed", tasks=2, gpus=1, priority=50)])
    session = _run(snap, "reclaim")
    assert sorted(kt.placements(session, "evict")) == ["elastic-2", "elastic-3"]


def _replicas(name, queue, status="Running", node="n1"):
    """A semi-preemptible job of two replica subgroups of two pods each; one replica (minSubGroup 1) is its core."""
    from kai.api import PodSet, SubGroup

    job = kt.job(name, queue, tasks=[kt.task(f"{name}-{r}-{k}", gpus=1, status=status, node=node if status ==
                                             "Running" else None, pod_set=f"r{r}") for r in range(2) for k in range(2)],
                 priority=50)
    job = attrs.evolve(job, semi_preemptible=True, preemptible=True, min_subgroup=1,
                       subgroups={f"g{r}": SubGroup(f"g{r}") for r in range(2)},
                       pod_sets={f"r{r}": PodSet(f"r{r}", 2, f"g{r}") for r in range(2)})
    return job


def test_the_core_of_a_subgroup_tree_is_its_minimum_of_subgroups():
    from kai.sdk import core_tasks

    job = _replicas("rep", "q")
    assert core_tasks(job, {t.uid for t in job.tasks.values()}) == {job.tasks["rep-0-0"].uid, job.tasks["rep-0-1"].uid}
    assert core_tasks(job, {job.tasks["rep-1-0"].uid}) == {job.tasks["rep-1-0"].uid}


def test_a_surplus_subgroup_goes_whole_and_may_run_over_quota():
    snap = kt.cluster(nodes=[kt.node("n1", gpus=4)], queues=[kt.queue("q", deserved_gpus=4)],
                      jobs=[_replicas("rep", "q"), kt.job("urgent", "q", tasks=2, gpus=1, priority=90)])
    assert sorted(kt.placements(_run(snap, "preempt"), "evict")) == ["rep-1-0", "rep-1-1"]
    nodes, queues = [kt.node("n1", gpus=8)], [kt.queue("q", deserved_gpus=2), kt.queue("other", deserved_gpus=6)]
    session = _run(kt.cluster(nodes=nodes, queues=queues, jobs=[_replicas("rep", "q", status="Pending")]), "allocate")
    assert len(kt.placements(session)) == 4
