"""What the scheduler loop publishes about the division: each queue's fair share."""

from __future__ import annotations

import attrs

from kai import testing as kt
from kai.framework import Session
from kai.metrics import Registry, SchedulerMetrics
from kai.scheduler.loop import fair_shares


def open_session(plugins):
    snapshot = kt.cluster(
        nodes=[kt.node("n1", gpus=8)],
        queues=[kt.queue("a", deserved_gpus=2), kt.queue("b", deserved_gpus=2)],
        jobs=[kt.job("ja", queue="a", tasks=6, gpus=1), kt.job("jb", queue="b", tasks=1, gpus=1)],
    )
    return Session(snapshot, kt.plugin_manager(plugins)).open()


def test_fair_shares_come_from_the_division_and_reach_the_metrics():
    session = open_session(["proportion"])
    try:
        shares = fair_shares(session)
    finally:
        session.close()
    # 8 GPUs: deserved 2 + 2, the rest over quota to the queue that asks for more (a: 6, b: 1)
    assert shares["a"][2] == 6 and shares["b"][2] == 1
    registry = Registry()
    metrics = SchedulerMetrics(registry)
    metrics.fair_shares({"gone": (1000, 1e9, 1), **shares})
    metrics.fair_shares(shares)
    assert registry.value("kai_queue_fair_share_gpu", {"queue_name": "a"}) == 6
    assert registry.value("kai_queue_fair_share_gpu", {"queue_name": "gone"}) is None


def test_without_a_dividing_plugin_there_are_no_fair_shares():
    session = open_session(["predicates"])
    try:
        assert fair_shares(session) == {}
    finally:
        session.close()


def test_decisions_of_an_action_are_counted_per_podgroup():
    from kai.scheduler.loop import record_decisions

    snapshot = kt.cluster(nodes=[kt.node("n1", gpus=8)], queues=[kt.queue("a")],
                          jobs=[kt.job("big", queue="a", tasks=3, gpus=1), kt.job("small", queue="a", gpus=1)])
    session = kt.run(snapshot, ["predicates"])
    assert len(session.decisions) == 4
    registry = Registry()
    metrics = SchedulerMetrics(registry)
    record_decisions(metrics, session, "allocate", session.decisions)
    assert registry.value("kai_podgroups_scheduled_by_action_total", {"action": "allocate"}) == 2
    assert registry.value("kai_preemption_attempts_total") == 0
    by_job = {session.jobs[d.task.job].name: [] for d in session.decisions}
    for d in session.decisions:
        by_job[session.jobs[d.task.job].name].append(d)
    evictions = [attrs.evolve(d, kind="evict") for d in by_job["big"]]
    record_decisions(metrics, session, "preempt", evictions + by_job["small"])
    job = session.jobs[by_job["big"][0].task.job]
    labels = {"podgroup": "big", "namespace": job.namespace, "uid": job.uid, "nodepool": "", "action": "preempt"}
    assert registry.value("kai_pod_group_evicted_pods_total", labels) == 3
    assert registry.value("kai_preemption_attempts_total") == 1
    assert registry.value("kai_podgroups_scheduled_by_action_total", {"action": "preempt"}) == 1


def test_the_loop_records_its_allocations_as_usage_and_reads_them_back_next_cycle():
    from kai.framework import parse_config
    from kai.scheduler.cache import Cycle
    from kai.scheduler.loop import Scheduler

    config = parse_config({"actions": "allocate", "usageDBConfig": {"clientType": "in-process"},
                           "tiers": [{"plugins": [{"name": "predicates"}, {"name": "proportion"}]}]})
    scheduler = Scheduler(None, config)
    seen = []

    def snapshot():
        snap = kt.cluster(nodes=[kt.node("n1", gpus=8)], queues=[kt.queue("a"), kt.queue("b")],
                          jobs=[kt.job("ja", queue="a", tasks=4, gpus=1)], now=kt.NOW + 60 * len(seen))
        seen.append(snap)
        return Cycle(snap, {}, {}, [])

    scheduler.cache.snapshot = snapshot
    scheduler.committer.commit = lambda session, cycle: None
    scheduler.run_once()
    assert seen[0].usage == {}  # nothing recorded before the first cycle
    scheduler.run_once()
    assert seen[1].usage["a"][2] > 0 and seen[1].usage.get("b", (0, 0, 0))[2] == 0
