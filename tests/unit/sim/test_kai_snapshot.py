"""KAI's snapshots read and written: the fixtures replayed, the configuration mapped, the round trip through the
live scheduler, ``/get-snapshot`` and ``simulate --kai-snapshot``."""

from __future__ import annotations

import copy
import io
import json
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import attrs
import pytest

from kai.api import names
from kai.cli import main as cli
from kai.common.errors import ConfigError
from kai.framework import DEFAULT_CONFIG, PluginError, PluginSpec, Session
from kai.framework.config import KAI_DEFAULT_ACTIONS
from kai.kube.client import object_path
from kai.kube.server import ObservabilityServer
from kai.metrics import Registry
from kai.scheduler.kaisnapshot import (
    RAW_OBJECTS,
    ROUTE,
    KaiSnapshot,
    kai_config,
    parse_snapshot,
    read_snapshot,
    scheduler_config,
    scheduler_params,
    snapshot_route,
    snapshot_zip,
    take_snapshot,
)
from kai.scheduler.loop import Scheduler
from kai.scheduler.partition import EVERYTHING, Partition
from kai.sim.kaisnapshot import kai_decisions, replay, without_binds
from support.kube import FakeApi

FIXTURES = Path(__file__).parent / "kai_snapshots"
ALL = sorted(FIXTURES.iterdir())
POOL = names.NODE_POOL_LABEL


def decisions(report: dict) -> list[tuple]:
    cycle = report["cycles"][0]
    kinds = {"bound": "bind", "pipelined": "pipeline"}
    return sorted([(kinds[p["kind"]], p["pod"], p["node"]) for p in cycle["placements"]]
                  + [("evict", e["pod"], e["node"]) for e in cycle["evictions"]])


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_every_fixture_replays_with_its_config(path):
    snapshot = read_snapshot(path)
    report = replay(snapshot, path.name, cycles=2, compare=True)
    assert report["actions"] == list(KAI_DEFAULT_ACTIONS)
    assert report["problems"] == []
    assert len(report["cycles"]) == 2
    assert report["cycles"][1]["placements"] == [] or path.name == "reclaim.json"  # fed back: nothing twice


def test_gangs_and_queues_agree_with_the_decisions_the_snapshot_shows():
    report = replay(read_snapshot(FIXTURES / "gangs-queues.json"), "gangs", compare=True)
    comp = report["comparison"]
    assert (comp["agree"], comp["total"], comp["unknown"]) == (8, 8, 0)
    outcomes = {p["pod"]: p["outcome"] for p in comp["pods"]}
    assert outcomes["team-a/gang-b-0"] == "same node" and outcomes["team-a/huge-c-0"] == "both pending"


def test_fractions_share_devices_and_reclaim_evicts_over_quota():
    fractions = replay(read_snapshot(FIXTURES / "fractions.zip"), "fractions")["cycles"][0]
    assert len(fractions["placements"]) == 5 and all(p["gpu_groups"] for p in fractions["placements"])
    reclaim = decisions(replay(read_snapshot(FIXTURES / "reclaim.json"), "reclaim"))
    assert [d[0] for d in reclaim] == ["evict", "evict", "pipeline"]


def test_a_snapshot_captured_from_kais_scheduler_agrees_but_for_which_pod_of_a_gang_goes_where():
    """KAI's Go scheduler, on a local control plane with no binder, placed gangs, fractions and single pods of
    two queues (its BindRequests) and left a gang too large pending (``PodScheduled=False``)."""
    comp = replay(read_snapshot(FIXTURES / "kai-captured.zip"), "captured", compare=True)["comparison"]
    assert (comp["agree"], comp["total"], comp["unknown"]) == (13, 15, 0)
    differ = [p for p in comp["pods"] if p["outcome"] != "same node" and p["outcome"] != "both pending"]
    assert {p["outcome"] for p in differ} == {"different node"}
    assert {p["job"] for p in differ} == {"gang-b"}  # identical pods of one gang, in another order
    assert sorted(p["here"] for p in differ) == sorted(p["kai"] for p in differ)


def test_a_kai_decision_differing_from_ours_is_shown_with_our_explanation():
    snapshot = read_snapshot(FIXTURES / "gangs-queues.json")
    for br in snapshot.objects["bindRequests"]:
        if br["spec"]["podName"] == "one-d-0":
            br["spec"]["selectedNode"] = "node-0"
    comp = replay(snapshot, "gangs", compare=True)["comparison"]
    entry = next(p for p in comp["pods"] if p["pod"] == "team-a/one-d-0")
    assert (entry["outcome"], entry["here"], entry["kai"]) == ("different node", "node-2", "node-0")


def test_a_snapshot_of_a_node_pool_replays_that_pools_nodes_and_pods_only():
    """KAI's scheduler of node pool ``pool-a`` (``partitionParams``) reads only the nodes, queues, PodGroups and
    BindRequests labelled with it; pool ``pool-b`` has room for the pod pool ``pool-a`` has none for."""
    snapshot = read_snapshot(FIXTURES / "two-pools.json")
    mapped = scheduler_config(snapshot)
    assert mapped.partition == Partition(POOL, "pool-a")
    report = replay(snapshot, "pool-a", compare=True)
    assert report["node_pool"] == f"{POOL}=pool-a"
    assert decisions(report) == [("bind", "gang-a-0", "node-a0"), ("bind", "gang-a-1", "node-a1")]
    assert [p["pod"] for p in report["cycles"][0]["pending"]] == ["big-a-0"]
    assert (report["comparison"]["agree"], report["comparison"]["total"]) == (3, 3)
    everything = replay(snapshot, "all", mapped=attrs.evolve(mapped, partition=EVERYTHING))
    assert ("big-a-0", "node-b0") in {d[1:] for d in decisions(everything)}  # the whole cluster has room for it
    default = attrs.evolve(snapshot, params={"partitionParams": {"NodePoolLabelKey": POOL, "NodePoolLabelValue": ""}})
    assert scheduler_config(default).partition == Partition(POOL)  # the nodes without the label: none here
    assert replay(default, "default")["cycles"][0]["placements"] == []


def test_a_node_pools_scheduler_serves_a_snapshot_that_replays_as_it_decides(tmp_path):
    snapshot = read_snapshot(FIXTURES / "two-pools.json")
    kube = cluster(without_binds(snapshot, kai_decisions(snapshot)))
    config = attrs.evolve(DEFAULT_CONFIG, plugins=(*DEFAULT_CONFIG.plugins, PluginSpec("snapshot")))
    scheduler = Scheduler(kube, config, partition=Partition(POOL, "pool-a"))
    served = snapshot_route(lambda: scheduler)()
    assert served is not None
    written = parse_snapshot(json.loads(zipfile.ZipFile(io.BytesIO(served[0])).read("snapshot.json")))
    assert written.params["partitionParams"] == {"NodePoolLabelKey": POOL, "NodePoolLabelValue": "pool-a"}
    assert [len(written.objects[k]) for k in ("nodes", "queues", "podGroups")] == [2, 2, 3]  # as KAI's plugin lists
    live = one_live_cycle(scheduler)
    ours = sorted((d.kind, d.task.name, d.node) for d in live.decisions)
    assert ours == [("bind", "gang-a-0", "node-a0"), ("bind", "gang-a-1", "node-a1")]
    assert decisions(replay(written, "served")) == ours


def one_live_cycle(scheduler: Scheduler) -> Session:
    """One cycle of ``scheduler`` on its API server, its writes made."""
    scheduler.cache.start()
    try:
        assert scheduler.cache.wait_synced(10) == []
        live = scheduler.run_once()
        assert scheduler.committer.flush(10)
    finally:
        scheduler.committer.close()
        scheduler.cache.stop()
    return live


def config_of(**changes) -> KaiSnapshot:
    snapshot = read_snapshot(FIXTURES / "reclaim.json")
    snapshot.config = {**snapshot.config, **changes}
    return snapshot


def test_the_config_maps_both_ways():
    params = scheduler_params(DEFAULT_CONFIG, "kai-scheduler", 120.0, 1.0)
    mapped = scheduler_config(KaiSnapshot(kai_config(DEFAULT_CONFIG), params, {}))
    assert mapped.config == DEFAULT_CONFIG
    assert (mapped.scheduler_name, mapped.stuck_after) == ("kai-scheduler", 120.0)
    config = attrs.evolve(DEFAULT_CONFIG, max_consolidation_preemptees=0, use_scheduling_signatures=False,
                          full_hierarchy_fairness=False, staleness_grace_period=-1.0,
                          queue_depth_per_action=(("allocate", 3),))
    back = scheduler_config(KaiSnapshot(kai_config(config), scheduler_params(config, "other", 5.0, 1.0), {}))
    assert back.config == config and (back.scheduler_name, back.stuck_after) == ("other", 5.0)
    assert "fullHierarchyFairness" not in scheduler_params(config, "other", 5.0, 1.0)  # Go leaves false out


def test_kai_plugins_without_a_counterpart_are_named():
    tiers = [{"plugins": [{"name": "predicates"}, {"name": "reflectjoborder"}, {"name": "sg-multinodegang"},
                          {"name": "snapshot"}]}]
    mapped = scheduler_config(config_of(tiers=tiers))
    assert [p.name for p in mapped.config.plugins] == ["predicates", "snapshot"]
    assert mapped.ignored[:2] == ("plugin reflectjoborder", "plugin sg-multinodegang")
    with pytest.raises(ConfigError, match="disableNodeOrder"):
        scheduler_config(config_of(tiers=[{"plugins": [{"name": "nodeplacement", "disableNodeOrder": True}]}]))
    with pytest.raises(ConfigError, match="partitionParams"):
        scheduler_config(KaiSnapshot(None, {"partitionParams": {"NodePoolLabelKey": "pool",
                                                                "NodePoolLabelValue": 1}}, {}))
    with pytest.raises(ConfigError, match="someFutureField"):
        scheduler_config(KaiSnapshot(None, {"someFutureField": 1}, {}))
    with pytest.raises(PluginError, match="nosuchplugin"):
        replay(config_of(tiers=[{"plugins": [{"name": "nosuchplugin"}]}]), "x")


def test_a_document_that_is_not_a_snapshot_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="rawObjects"):
        parse_snapshot({"config": {}})
    with pytest.raises(ConfigError, match="unknown field"):
        parse_snapshot({"rawObjects": {"widgets": []}})
    bad = tmp_path / "s.zip"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("other.json", "{}")
    with pytest.raises(ConfigError, match="holds no snapshot.json"):
        read_snapshot(bad)


# --- the round trip: the live scheduler on a cluster, and the replay of its snapshot ------------------------------

def cluster(snapshot: KaiSnapshot) -> FakeApi:
    """An API server holding the snapshot's objects."""
    kube = FakeApi()
    for field, informer in RAW_OBJECTS.items():
        for obj in snapshot.objects[field]:
            meta = obj["metadata"]
            kube.add(object_path(*getattr(names, informer.upper()), meta.get("namespace"), meta["name"]),
                     copy.deepcopy(obj))
    return kube


@pytest.mark.parametrize("name", ["gangs-queues.json", "fractions.zip", "reclaim.json"])
def test_round_trip_live_cluster_to_file_to_replay_decides_the_same(name, tmp_path):
    snapshot = read_snapshot(FIXTURES / name)
    kube = cluster(without_binds(snapshot, kai_decisions(snapshot)))  # KAI's last decisions left to make again
    config = attrs.evolve(DEFAULT_CONFIG, plugins=(*DEFAULT_CONFIG.plugins, PluginSpec("snapshot")))
    scheduler = Scheduler(kube, config)
    written = tmp_path / "snapshot.zip"
    written.write_bytes(snapshot_zip(take_snapshot(kube, config, "kai-scheduler", 120.0, 1.0)))
    live = one_live_cycle(scheduler)
    ours = sorted((d.kind, d.task.uid.split("/")[1], d.node) for d in live.decisions)
    assert ours, "the fixture gives the scheduler something to decide"
    assert decisions(replay(read_snapshot(written), name)) == ours


def test_the_scheduler_serves_its_snapshot_while_the_plugin_is_configured():
    kube = cluster(read_snapshot(FIXTURES / "reclaim.json"))
    server = ObservabilityServer("127.0.0.1:0", Registry())
    with_plugin = attrs.evolve(DEFAULT_CONFIG, plugins=(*DEFAULT_CONFIG.plugins, PluginSpec("snapshot")))
    scheduler, without = Scheduler(kube, with_plugin), Scheduler(kube, DEFAULT_CONFIG)
    server.add_route(ROUTE, snapshot_route(lambda: scheduler))
    server.add_route("/without", snapshot_route(lambda: without))
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{ROUTE}") as response:
            assert response.headers["Content-Type"] == "application/zip"
            body = response.read()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/without")
        assert missing.value.code == 404
    finally:
        server.stop()
    document = json.loads(zipfile.ZipFile(io.BytesIO(body)).read("snapshot.json"))
    assert list(document) == ["config", "schedulerParams", "rawObjects", "discovery"]
    assert list(document["rawObjects"]) == list(RAW_OBJECTS)
    assert len(document["rawObjects"]["pods"]) == 5
    assert [t["plugins"][-1]["name"] for t in document["config"]["tiers"]] == ["snapshot"]


def test_simulate_kai_snapshot_on_the_command_line(capsys):
    path = str(FIXTURES / "gangs-queues.json")
    assert cli(["simulate", "--kai-snapshot", path, "--compare"]) == 0
    out = capsys.readouterr().out
    assert "compared with KAI's next decisions: 8 of 8 pods agree (100%)" in out
    assert "bound     gang-b-0 -> node-1" in out
    assert cli(["simulate", "--kai-snapshot", path, "--json", "--cycles", "2"]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"][0]["cycles"]) == 2


def test_simulate_kai_snapshot_explains_a_pod_pending_after_the_replay(capsys):
    path = str(FIXTURES / "kai-captured.zip")
    assert cli(["simulate", "--kai-snapshot", path, "--explain", "team-a/huge-c-1", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["namespace"], answer["name"], answer["queue"]) == ("team-a", "huge-c", "queue-a")
    reason = answer["reason"]
    assert reason["code"] == "PodSchedulingErrors"
    assert reason["details"]["resource"] == "gpu" and reason["details"]["requested"] == 24
    assert reason["details"]["missing"] == reason["details"]["requested"] - reason["details"]["free"]
    assert cli(["simulate", "--kai-snapshot", path, "--explain", "team-a/huge-c"]) == 0
    assert "would run if:" in capsys.readouterr().out
    assert cli(["simulate", "--kai-snapshot", path, "--explain", "team-a/nothing-here"]) == 1
    assert "not pending" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli(["simulate", "--kai-snapshot", path, "--explain", "team-a/huge-c", "--compare"])


def test_simulate_kai_snapshot_reports_what_cannot_be_mapped(tmp_path, capsys):
    snapshot = config_of(tiers=[{"plugins": [{"name": "nosuchplugin"}]}])
    path = tmp_path / "s.zip"
    path.write_bytes(snapshot_zip(snapshot))
    assert cli(["simulate", "--kai-snapshot", str(path)]) == 2
    assert "nosuchplugin" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli(["simulate", "--compare", str(path)])
