"""One scheduler per SchedulingShard: shards served as they come and go, a bad one alone, the default loop
when there are none, a Lease and metrics per shard."""

from __future__ import annotations

import threading
import time

from kai.api import names
from kai.kube import leader
from kai.kube.client import object_path
from kai.kube.leader import LeaderElector
from kai.metrics import Registry, SchedulerMetrics
from kai.run import _parser, scheduling_shards
from kai.scheduler.bindmode import BIND_REQUEST
from kai.scheduler.loop import Scheduler
from kai.scheduler.partition import Partition
from kai.scheduler.shards import ShardSchedulers, lease_of, partition_of
from support.kube import FakeApi

from .test_partition import bindings, cluster


def shard_path(name: str) -> str:
    return object_path(*names.SCHEDULINGSHARDS, name=name)


def add_shard(kube: FakeApi, name: str, value: object = None) -> None:
    kube.add(shard_path(name), {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard",
                                "metadata": {"name": name, "generation": 1},
                                "spec": {} if value is None else {"partitionLabelValue": value}})


def wait_until(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def conditions(kube: FakeApi, name: str) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (kube.objects[shard_path(name)].get("status") or {}).get("conditions", [])}


class Running:
    """ShardSchedulers on a thread of its own for the duration of a ``with``."""

    def __init__(self, kube: FakeApi, **options) -> None:
        self.made: list[tuple[str, Partition]] = []

        def make(shard: str, partition: Partition) -> Scheduler:
            self.made.append((shard, partition))
            return Scheduler(kube, shard=shard, partition=partition, period=0.1, sync_timeout=5.0,
                             bind_mode=BIND_REQUEST)  # what each binds shows in its BindRequests

        self.component = ShardSchedulers(kube, make, **options)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.component.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> ShardSchedulers:
        self.thread.start()
        return self.component

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(20)
        assert not self.thread.is_alive()


def test_without_shards_the_default_partition_is_served_and_a_new_shard_gets_its_scheduler_then_loses_it():
    kube = cluster()
    with Running(kube) as shards:
        wait_until(lambda: "p-q" in bindings(kube))
        assert list(shards.loops) == ["default"] and shards.loops["default"].partition == Partition()
        assert "p-qa" not in bindings(kube)
        add_shard(kube, "pool-a", "pool-a")
        wait_until(lambda: "p-qa" in bindings(kube))
        assert bindings(kube)["p-qa"]["spec"]["selectedNode"] == "a-0"
        wait_until(lambda: conditions(kube, "pool-a").get("Deployed") == "True")
        wait_until(lambda: shards.ready()[0])
        # a shard exists now: the stand-in for the missing default shard is no longer served
        assert list(shards.loops) == ["pool-a"]
        loop = shards.loops["pool-a"]
        kube.delete(shard_path("pool-a"))
        wait_until(lambda: "pool-a" not in shards.loops)
        assert not loop.thread.is_alive() and loop.scheduler is None


def test_a_shard_with_a_bad_partition_gets_an_event_and_deployed_false_and_the_others_go_on():
    kube = cluster()
    add_shard(kube, "default")
    add_shard(kube, "broken", 3)
    with Running(kube) as shards:
        wait_until(lambda: "p-q" in bindings(kube))
        wait_until(lambda: conditions(kube, "broken").get("Deployed") == "False")
        assert list(shards.loops) == ["default"]
        events = [e for e in kube.events if e["reason"] == names.REASON_INVALID_CONFIGURATION]
        assert len(events) == 1 and "partitionLabelValue" in events[0]["message"]
        wait_until(lambda: conditions(kube, "default").get("Deployed") == "True")


def test_the_snapshot_served_is_the_default_shards_else_the_only_shards():
    kube = cluster()
    add_shard(kube, "pool-a", "pool-a")
    with Running(kube) as shards:
        wait_until(lambda: shards.loops.get("pool-a") is not None and shards.loops["pool-a"].scheduler is not None)
        assert shards.snapshot_scheduler() is shards.loops["pool-a"].scheduler
        add_shard(kube, "default")
        wait_until(lambda: shards.loops.get("default") is not None and shards.loops["default"].scheduler is not None)
        assert shards.snapshot_scheduler() is shards.loops["default"].scheduler


def test_named_shards_only_and_no_stand_in_for_a_missing_pool():
    kube = cluster()
    add_shard(kube, "pool-a", "pool-a")
    add_shard(kube, "default")
    with Running(kube, shards=["pool-a"]) as shards:
        wait_until(lambda: "p-qa" in bindings(kube))
        assert list(shards.loops) == ["pool-a"]
    assert "p-q" not in bindings(kube)
    kube = cluster()
    with Running(kube, shards=["pool-b"]) as shards:
        time.sleep(0.5)
        assert not shards.loops and shards.ready() == (True, "no scheduling shard to serve")


def test_the_options_name_shards_by_list_repeat_or_none():
    def parsed(*argv):
        return scheduling_shards(_parser().parse_args(list(argv)).scheduling_shard)

    assert parsed() is None
    assert parsed("--scheduling-shard", "pool-a") == ["pool-a"]
    assert parsed("--scheduling-shard", "a,b", "--scheduling-shard", "c,a") == ["a", "b", "c"]
    assert parsed("--scheduling-shard", "") == []


def test_leases_and_partitions_follow_kais_names():
    assert lease_of("kai-scheduler", "default", Partition()) == "kai-scheduler"
    assert lease_of("kai-scheduler", "pool-a", Partition(value="a")) == "kai-scheduler-a"
    assert lease_of("kai-scheduler", "pool-a", Partition()) == "kai-scheduler-pool-a"
    assert partition_of({"spec": {"partitionLabelValue": "a"}}, "k") == Partition("k", "a")
    assert partition_of({"spec": {"partitionLabelValue": ""}}, "k") == Partition("k", None)


def test_each_shard_has_its_metrics_labelled_and_they_go_with_it():
    registry = Registry()
    pool = registry.labelled("shard", "pool-a")
    SchedulerMetrics(registry.labelled("shard", "default")).cycle_ran(True)
    SchedulerMetrics(pool).cycle_ran(True)
    value = "kai_scheduler_cycles_total"
    assert registry.value(value, {"decided": "true", "shard": "pool-a"}) == 1.0
    assert registry.value(value, {"decided": "true", "shard": "default"}) == 1.0
    registry.drop(pool)
    assert registry.value(value, {"decided": "true", "shard": "pool-a"}) is None


def test_with_leader_election_each_shard_holds_its_own_lease(monkeypatch):
    kube = cluster()
    monkeypatch.setattr(leader, "Kube", lambda api_client, timeout: kube)  # the elector's own client
    add_shard(kube, "default")
    add_shard(kube, "pool-a", "pool-a")

    def elector(lease: str) -> LeaderElector:
        return LeaderElector(kube, lease, "kai-scheduler", identity=f"me-{lease}", retry_period=0.1)

    with Running(kube, elector=elector) as shards:
        wait_until(lambda: {"p-q", "p-qa"} <= set(bindings(kube)))
        holders = {name: kube.objects[object_path("coordination.k8s.io", "v1", "leases", "kai-scheduler", name)]
                   ["spec"]["holderIdentity"] for name in ("kai-scheduler", "kai-scheduler-pool-a")}
        assert holders == {"kai-scheduler": "me-kai-scheduler", "kai-scheduler-pool-a": "me-kai-scheduler-pool-a"}
        wait_until(lambda: shards.ready()[0])
        assert "shard pool-a: " in shards.ready()[1]
