"""What the scheduler loop publishes: each queue's fair share and usage, the cycle's timings and what
each action did."""

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
    metrics.fair_shares(shares, {"a": "Team A"})
    assert registry.value("kai_queue_fair_share_gpu", {"queue_name": "Team A", "queue_metadata_name": "a",
                                                       "queue_display_name": "Team A"}) == 6
    assert registry.value("kai_queue_fair_share_gpu", {"queue_name": "b", "queue_metadata_name": "b",
                                                       "queue_display_name": ""}) == 1
    assert registry.value("kai_queue_fair_share_gpu", {"queue_name": "gone", "queue_metadata_name": "gone",
                                                       "queue_display_name": ""}) is None


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
    assert registry.value("kai_podgroups_scheduled_by_action", {"action": "allocate"}) == 2
    assert registry.value("kai_total_preemption_attempts") == 0
    by_job = {session.jobs[d.task.job].name: [] for d in session.decisions}
    for d in session.decisions:
        by_job[session.jobs[d.task.job].name].append(d)
    evictions = [attrs.evolve(d, kind="evict") for d in by_job["big"]]
    record_decisions(metrics, session, "preempt", evictions + by_job["small"])
    job = session.jobs[by_job["big"][0].task.job]
    labels = {"podgroup": "big", "namespace": job.namespace, "uid": job.uid, "nodepool": "", "action": "preempt"}
    assert registry.value("kai_pod_group_evicted_pods_total", labels) == 3
    assert registry.value("kai_total_preemption_attempts") == 1
    assert registry.value("kai_podgroups_scheduled_by_action", {"action": "preempt"}) == 1
    # an action that tried jobs through the solver scheduled only those: the victims it moved do not count
    small = by_job["small"][0].task.job
    moved = [attrs.evolve(d, kind="pipeline") for d in by_job["big"]]
    record_decisions(metrics, session, "consolidation", moved + by_job["small"], [small], "pool-a")
    assert registry.value("kai_podgroups_scheduled_by_action", {"action": "consolidation"}) == 1
    assert registry.value("kai_podgroups_acted_on_by_action", {"action": "consolidation"}) == 1


def test_the_loop_records_its_allocations_as_usage_and_reads_them_back_next_cycle():
    from kai.framework import parse_config
    from kai.scheduler.build import Cycle
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


def _scheduler(snapshot, actions, plugins):
    """A scheduler with metrics whose cache gives ``snapshot`` and whose committer writes nothing."""
    from kai.framework import parse_config
    from kai.scheduler.build import Cycle
    from kai.scheduler.loop import Scheduler

    config = parse_config({"actions": ", ".join(actions), "tiers": [{"plugins": [{"name": p} for p in plugins]}]})
    registry = Registry()
    scheduler = Scheduler(None, config, metrics=SchedulerMetrics(registry))
    scheduler.cache.snapshot = lambda: Cycle(snapshot, {}, {}, [])
    scheduler.committer.commit = lambda session, cycle: None
    return scheduler, registry


def test_a_cycle_records_kai_s_scheduler_metrics():
    snapshot = kt.cluster(
        nodes=[kt.node("n1", gpus=2)],
        queues=[kt.queue("q1", deserved_gpus=1), attrs.evolve(kt.queue("q2", deserved_gpus=1), display_name="Two")],
        jobs=[kt.job("big", queue="q1", gpus=2, priority=50, status="Running", node="n1"),
              kt.job("small", queue="q2", gpus=1, priority=50)])
    plugins = ["predicates", "proportion", "priority", "elastic", "taskorder", "nodeplacement"]
    scheduler, registry = _scheduler(snapshot, ["allocate", "reclaim", "preempt"], plugins)
    session = scheduler.run_once()
    assert kt.placements(session, "evict") == {"big-0": "n1"}

    e2e = registry.value("kai_e2e_scheduling_latency_milliseconds")
    assert 0 < registry.value("kai_open_session_latency_milliseconds") <= e2e
    for action in ("allocate", "reclaim", "preempt"):
        assert 0 < registry.value("kai_action_scheduling_latency_milliseconds", {"action": action}) <= e2e
    # every plugin's session hooks are timed on their own (proportion opens and closes, predicates opens)
    timed = {(s.labels["plugin"], s.labels["OnSession"]) for m in registry.collectors.collect()
             if m.name == "kai_plugin_scheduling_latency_milliseconds" for s in m.samples}
    assert timed == {("proportion", "OnSessionOpen"), ("proportion", "OnSessionClose"), ("predicates", "OnSessionOpen")}
    assert registry.value("kai_plugin_scheduling_latency_milliseconds",
                          {"plugin": "proportion", "OnSession": "OnSessionOpen"}) <= e2e
    # reclaim tried the pending job and placed it; allocate and preempt placed nothing
    assert registry.value("kai_podgroups_acted_on_by_action", {"action": "reclaim"}) == 1
    assert registry.value("kai_podgroups_scheduled_by_action", {"action": "reclaim"}) == 1
    assert registry.value("kai_podgroups_scheduled_by_action", {"action": "allocate"}) is None
    assert registry.value("kai_total_preemption_attempts") == 0
    big = session.jobs["default/big"]
    assert registry.value("kai_pod_group_evicted_pods_total", {
        "podgroup": "big", "namespace": big.namespace, "uid": big.uid, "nodepool": "default", "action": "reclaim"}) == 1
    two = {"queue_name": "Two", "queue_metadata_name": "q2", "queue_display_name": "Two"}
    assert registry.value("kai_queue_fair_share_gpu", two) == 1
    assert registry.value("kai_queue_gpu_usage", two) == 0  # no usage database: KAI reports zero usage


def test_a_scheduler_without_metrics_wraps_no_plugin():
    from kai.framework import parse_config
    from kai.scheduler.loop import Scheduler
    from kai.scheduler.probe import NAME

    config = parse_config({"actions": "allocate", "tiers": [{"plugins": [{"name": "proportion"}]}]})
    scheduler = Scheduler(None, config)
    assert scheduler.probe is None and scheduler.plugins.pm.get_plugin(NAME) is None
    impl = scheduler.plugins.pm.hook.kai_session_open.get_hookimpls()[0]
    assert impl.function.__qualname__.endswith("kai_session_open")
