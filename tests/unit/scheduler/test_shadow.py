"""Shadow mode: the scheduler's cycles on a cluster KAI schedules write nothing, and what KAI did is set beside them."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from kai.api import names
from kai.framework import Session
from kai.kube.client import object_path
from kai.metrics import Registry, exposition
from kai.run import main as run_main
from kai.scheduler.kaisnapshot import RAW_OBJECTS, read_snapshot
from kai.scheduler.loop import Scheduler
from kai.scheduler.shadow import ShadowCommitter
from kai.sim.kaisnapshot import kai_decisions, without_binds
from support.kube import FakeApi

FIXTURES = Path(__file__).parents[1] / "sim" / "kai_snapshots"


def cluster(name: str) -> tuple[FakeApi, dict]:
    """An API server holding a fixture's objects without KAI's last BindRequests, and those BindRequests."""
    snapshot = read_snapshot(FIXTURES / name)
    kai = {br["spec"]["podName"]: br for br in snapshot.objects["bindRequests"]}
    kube = FakeApi()
    for field, informer in RAW_OBJECTS.items():
        for obj in without_binds(snapshot, kai_decisions(snapshot)).objects[field]:
            kube.add(path(informer, obj), copy.deepcopy(obj))
    return kube, kai


def path(informer: str, obj: dict) -> str:
    meta = obj["metadata"]
    return object_path(*getattr(names, informer.upper()), meta.get("namespace"), meta["name"])


@pytest.fixture
def shadow(request):
    kube, kai = cluster(request.param)
    registry = Registry()
    scheduler = Scheduler(kube)
    scheduler.committer = ShadowCommitter(scheduler.cache, registry, settle=0.0)
    scheduler.cache.start()
    assert scheduler.cache.wait_synced(10) == []
    yield kube, kai, scheduler, registry
    scheduler.cache.stop()


def seen(scheduler: Scheduler, informer: str, check) -> None:
    deadline = time.monotonic() + 10
    while not check(scheduler.cache.informers[informer]):
        assert time.monotonic() < deadline, f"the watch of {informer} did not show the change"
        time.sleep(0.01)


def outcomes(committer: ShadowCommitter) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in committer.report()["divergences"]:
        out.setdefault(d["outcome"], []).append(d["pod"])
    return out


@pytest.mark.parametrize("shadow", ["gangs-queues.json"], indirect=True)
def test_binds_are_set_beside_kais_and_nothing_is_written(shadow):
    kube, kai, scheduler, registry = shadow
    scheduler.run_once()
    committer = scheduler.committer
    assert isinstance(committer, ShadowCommitter)
    assert {v.node for k, v in committer.verdicts.items() if "gang-b" in k} == {"node-1"}
    kai["one-d-0"]["spec"]["selectedNode"] = "node-0"  # KAI chose otherwise for this one
    del kai["gang-b-3"]  # and has not bound this one (yet)
    for br in kai.values():
        kube.add(path("bindrequests", br), copy.deepcopy(br))
    seen(scheduler, "bindrequests", lambda inf: len(inf) == len(kai))
    scheduler.run_once()
    report = committer.report()
    assert report["outcomes"] == {"same node": 3, "different node": 1, "bound here only": 1}
    assert outcomes(committer) == {"different node": ["team-a/one-d-0"], "bound here only": ["team-a/gang-b-3"]}
    entry = next(d for d in report["divergences"] if d["outcome"] == "different node")
    assert (entry["here"], entry["kai"]) == ("node-2", "node-0")
    assert 'shadow_decisions_total{outcome="same node"} 3.0' in exposition(registry).decode()
    assert {call.method for call in kube.calls} <= {"GET", "WATCH"}, "shadow mode writes nothing"


@pytest.mark.parametrize("shadow", ["gangs-queues.json"], indirect=True)
def test_a_pod_kai_placed_while_the_cycle_ran_gets_no_verdict(shadow):
    kube, kai, scheduler, _ = shadow
    cycle = scheduler.cache.snapshot()
    session = Session(cycle.snapshot, scheduler.plugins).open()
    session.run_actions(list(scheduler.plugins.config.actions))
    for br in kai.values():
        kube.add(path("bindrequests", br), copy.deepcopy(br))
    seen(scheduler, "bindrequests", lambda inf: len(inf) == len(kai))
    scheduler.committer.commit(session, cycle)
    session.close()
    assert sorted(scheduler.committer.verdicts) == ["team-a/huge-c-0", "team-a/huge-c-1", "team-a/huge-c-2"]


@pytest.mark.parametrize("shadow", ["reclaim.json"], indirect=True)
def test_evictions_are_set_beside_the_pods_kai_deletes(shadow):
    kube, _, scheduler, _ = shadow
    session = scheduler.run_once()
    assert sorted(d.task.name for d in session.decisions if d.kind == "evict") == ["a-2-0", "a-3-0"]
    victim = kube.objects[object_path("", "v1", "pods", "team-a", "a-3-0")]
    kube.add(object_path("", "v1", "pods", "team-a", "a-3-0"),
             {**victim, "metadata": {**victim["metadata"], "deletionTimestamp": "2026-01-05T10:01:00Z"}})
    seen(scheduler, "pods", lambda inf: inf.get("team-a/a-3-0").deleting)
    scheduler.run_once()
    report = scheduler.committer.report()
    assert report["outcomes"]["evicted by both"] == 1 and report["outcomes"]["evicted here only"] == 1
    assert outcomes(scheduler.committer)["evicted here only"] == ["team-a/a-2-0"]
    assert {call.method for call in kube.calls} <= {"GET", "WATCH"}


def test_the_report_file_is_written(tmp_path):
    kube, _ = cluster("fractions.zip")
    scheduler = Scheduler(kube)
    report = tmp_path / "shadow.json"
    scheduler.committer = ShadowCommitter(scheduler.cache, report_file=str(report))
    scheduler.cache.start()
    try:
        scheduler.cache.wait_synced(10)
        scheduler.run_once()
    finally:
        scheduler.cache.stop()
    assert json.loads(report.read_text()) == {"cycles": 1, "outcomes": {}, "awaiting_kai": 5, "divergences": []}


@pytest.mark.parametrize("argv, message", [
    (["--shadow", "--components", "scheduler,binder"], "--components must be 'scheduler'"),
    (["--shadow", "--leader-elect"], "not even a Lease"),
])
def test_shadow_mode_runs_the_scheduler_alone_without_a_lease(argv, message, capsys):
    assert run_main(argv) == 2
    assert message in capsys.readouterr().err
