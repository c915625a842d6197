"""The visibility API: the last cycle's view, served paginated from the metrics server."""

import json
import urllib.error
import urllib.request

import pytest

from kai import testing as kt
from kai.framework import parse_config
from kai.kube.server import METRICS, PROBES, ObservabilityServer
from kai.metrics import Registry
from kai.scheduler.build import Cycle
from kai.scheduler.loop import Scheduler
from kai.scheduler.visibility import PREFIX, Visibility

PLUGINS = ["predicates", "proportion", "priority", "elastic", "taskorder", "nodeplacement"]


def snapshot():
    """Two queues of ten 1-GPU jobs each on a 2-GPU node: two are placed, eighteen stay pending."""
    jobs = [kt.job(f"{q}-{i}", queue=q, gpus=1, creation=kt.NOW - 100 + i) for q in ("a", "b") for i in range(10)]
    return kt.cluster(nodes=[kt.node("n1", gpus=2)],
                      queues=[kt.queue("a", deserved_gpus=1), kt.queue("b", deserved_gpus=1)], jobs=jobs)


def scheduler(metrics=False):
    from kai.metrics import SchedulerMetrics

    config = parse_config({"actions": "allocate", "tiers": [{"plugins": [{"name": p} for p in PLUGINS]}]})
    s = Scheduler(None, config, metrics=SchedulerMetrics(Registry()) if metrics else None)
    s.cache.snapshot = lambda: Cycle(snapshot(), {}, {}, [])
    s.committer.commit = lambda session, cycle: None
    return s


@pytest.mark.parametrize("metrics", [False, True])
def test_the_scheduler_hands_each_cycle_to_its_observer(metrics):
    s, visibility = scheduler(metrics), Visibility()
    assert visibility.answer(PREFIX + "pending") == (503, {"error": "no scheduling cycle has run yet"})
    s.observer = visibility
    s.run_once()
    status, body = visibility.answer(PREFIX + "pending")
    assert status == 200 and body["cycle"] == 1 and body["total"] == 18


def test_pending_in_order_with_positions_paginated():
    s, visibility = scheduler(), Visibility("pool-a")
    s.observer = visibility
    s.run_once()
    _, first = visibility.answer(PREFIX + "pending?limit=4")
    # a job that does not fit leaves its queue's standing as it was: queue a stays first, oldest job first
    assert [(i["name"], i["position_in_cluster"], i["position_in_queue"]) for i in first["items"]] == [
        ("a-1", 1, 1), ("a-2", 2, 2), ("a-3", 3, 3), ("a-4", 4, 4)]
    item = first["items"][0]
    assert item["requested"]["gpu"] == 1 and item["age_seconds"] == 99
    assert item["reason"]["details"]["kind"] in ("insufficient-resources", "queue-quota", "not-considered")
    _, page = visibility.answer(PREFIX + "pending?queue=b&offset=8&limit=5")
    assert page["total"] == 9 and [i["name"] for i in page["items"]] == ["b-9"]
    _, capped = visibility.answer(PREFIX + "pending?limit=100000")
    assert len(capped["items"]) == 18
    assert visibility.answer(PREFIX + "pending?limit=x")[0] == 400
    _, explained = visibility.answer(PREFIX + "explain/default/b-3-0")
    assert explained["name"] == "b-3" and explained["position_in_queue"] == 3
    assert explained["position_in_cluster"] == 12
    assert visibility.answer(PREFIX + "explain/default/a-0")[0] == 404  # placed
    assert visibility.answer(PREFIX + "nope")[0] == 404


def tried_in_order(monkeypatch):
    """The jobs the allocate action tries, in order."""
    from kai.actions import allocate

    tried, step = [], allocate.allocate_step

    def spy(session, job):
        tried.append(job.name)
        return step(session, job)

    monkeypatch.setattr(allocate, "allocate_step", spy)
    return tried


def test_the_order_served_is_the_order_allocate_tries(monkeypatch):
    """Queues of three priorities and shares, jobs of several priorities and sizes, some placed: the pending ones
    are served in the order allocate tried them, in this cycle and in the next, which finds the same cluster."""
    queues = [kt.queue("hi", deserved_gpus=2, priority=200), kt.queue("mid", deserved_gpus=4),
              kt.queue("low", deserved_gpus=1), kt.queue("spare", deserved_gpus=0)]
    jobs = [kt.job(f"{q}-{i}", queue=q, gpus=1 + i % 3, priority=50 + 25 * (i % 2), creation=kt.NOW - 60 + i)
            for q in ("hi", "mid", "low", "spare") for i in range(6)]
    jobs.append(kt.job("mid-held", queue="mid", gpus=2, status="Running", node="n1"))
    cluster = kt.cluster(nodes=[kt.node("n1", gpus=4), kt.node("n2", gpus=4)], queues=queues, jobs=jobs)
    tried = tried_in_order(monkeypatch)
    s, visibility = scheduler(), Visibility()
    s.cache.snapshot = lambda: Cycle(cluster, {}, {}, [])
    s.observer = visibility
    s.run_once()
    _, body = visibility.answer(PREFIX + "pending?limit=1000")
    served = [i["name"] for i in body["items"]]
    assert len(served) > 10 and len({i["queue"] for i in body["items"]}) == 4
    last = {name: k for k, name in enumerate(tried)}
    assert served == sorted(served, key=last.__getitem__)
    tried.clear()
    s.run_once()  # the same cluster: the pending jobs are tried in the order served
    assert [name for name in tried if name in served] == served


def test_queues_and_nodes():
    s, visibility = scheduler(), Visibility("pool-a")
    s.observer = visibility
    s.run_once()
    _, queues = visibility.answer(PREFIX + "queues")
    gpu = {q["name"]: q["resources"]["gpu"] for q in queues["items"]}
    assert gpu["a"]["deserved"] == 1 and gpu["a"]["fair_share"] == 1 and gpu["a"]["allocated"] == 1
    assert gpu["a"]["requested"] == 10 and gpu["a"]["limit"] == -1 and gpu["a"]["bounded_by"]
    _, nodes = visibility.answer(PREFIX + "nodes")
    (n1,) = nodes["items"]
    assert n1["name"] == "n1" and n1["node_pool"] == "pool-a" and n1["allocated"]["gpu"] == 2
    assert n1["free_whole_gpus"] == 0


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.headers["Content-Type"], json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def test_served_with_the_metrics_only():
    s, visibility = scheduler(), Visibility()
    s.observer = visibility
    s.run_once()
    metrics = ObservabilityServer("127.0.0.1:0", Registry(), routes=(METRICS,))
    probes = ObservabilityServer("127.0.0.1:0", Registry(), routes=(PROBES,))
    metrics.visibility = probes.visibility = visibility.answer
    metrics.start()
    probes.start()
    try:
        status, kind, body = get(metrics.port, PREFIX + "pending?limit=1")
        assert status == 200 and kind == "application/json" and body["items"][0]["name"] == "a-1"
        assert get(metrics.port, PREFIX + "explain/default/zz")[0] == 404
        assert get(probes.port, PREFIX + "pending")[0] == 404
    finally:
        metrics.stop()
        probes.stop()


def test_a_check_has_the_next_cycle_keep_its_snapshot_and_copies_it_and_runs_the_kernel_on_the_request_thread():
    s, visibility = scheduler(), Visibility()
    s.observer = visibility
    s.run_once()
    assert visibility.base is None  # nobody asked: nothing kept
    status, body = visibility.explain("default", "b-9", check=True, wait=0.0)
    assert status == 200 and all(w["verified"] is None for w in body["reason"]["would_run_if"])
    assert visibility.copy_wanted.is_set()
    s.run_once()
    assert visibility.base.cycle == 2 and not visibility.copy_wanted.is_set()
    s.run_once()  # a cycle after the one kept changes nothing of it
    copy = visibility.base.snapshot()
    assert all(t.status.value == "Pending" for j in copy.jobs.values() for t in j.tasks.values())
    status, body = visibility.answer(PREFIX + "explain/default/b-9?check=true")
    checked = [w for w in body["reason"]["would_run_if"] if w["change"]]
    assert status == 200 and checked and all(w["verified"] in (True, False) for w in checked)
    assert body["checked_on_cycle"] == 2 and visibility.base.snapshot() is copy
    s.run_once()  # a later check within the interval reuses the copy: the cycles keep nothing more
    status, body = visibility.explain("default", "a-9", check=True, wait=0.0)
    assert body["cycle"] == 4 and body["checked_on_cycle"] == 2 and not visibility.copy_wanted.is_set()


def test_kai_run_serves_the_schedulers_view_with_its_metrics():
    from kai.run import serve_visibility

    s = Scheduler(None)
    server = ObservabilityServer("127.0.0.1:0", Registry(), routes=(METRICS,))
    try:
        serve_visibility([object(), s], server)
        assert isinstance(s.observer, Visibility) and server.visibility == s.observer.answer
    finally:
        server.stop()


def test_in_a_process_serving_shards_the_default_shards_view_is_served():
    from kai.run import serve_visibility
    from kai.scheduler.partition import Partition
    from kai.scheduler.shards import ShardSchedulers

    shards = ShardSchedulers(None, lambda shard, partition: scheduler())
    server = ObservabilityServer("127.0.0.1:0", Registry(), routes=(METRICS,))
    try:
        serve_visibility([shards], server)
        assert server.visibility(PREFIX + "pending")[0] == 503  # no shard yet
        s = shards.make("default", Partition("kai.scheduler/node-pool"))

        class Loop:
            scheduler = s

        shards.loops["default"] = Loop()
        s.run_once()
        status, body = server.visibility(PREFIX + "pending?limit=1")
        assert status == 200 and body["total"] == 18
    finally:
        server.stop()
