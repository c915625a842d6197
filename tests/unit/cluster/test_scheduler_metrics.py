"""What the scheduler loop publishes about the division: each queue's fair share."""

from __future__ import annotations

from kai import testing as kt
from kai.cluster.scheduler import fair_shares
from kai.framework import Session
from kai.metrics import Registry, SchedulerMetrics


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
