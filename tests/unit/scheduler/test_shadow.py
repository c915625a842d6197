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
from kai.scheduler.visibility import PREFIX, Visibility
from kai.sim.explain import print_answer
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


def kai_placed(kube: FakeApi, scheduler: Scheduler, binds) -> None:
    """KAI's BindRequests ``binds`` made, and seen by the scheduler's watch."""
    binds = list(binds)
    for br in binds:
        kube.add(path("bindrequests", br), copy.deepcopy(br))
    names = {br["metadata"]["name"] for br in binds}
    seen(scheduler, "bindrequests", lambda inf: names <= {b.name for b in inf.list()})


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
    late = kai.pop("gang-b-3")  # and has not bound this one (yet)
    kai_placed(kube, scheduler, kai.values())
    scheduler.run_once()
    report = committer.report()
    assert report["outcomes"] == {"same node": 3, "different node": 1, "bound here only": 1}
    assert outcomes(committer) == {"different node": ["team-a/one-d-0"], "bound here only": ["team-a/gang-b-3"]}
    entry = next(d for d in report["divergences"] if d["outcome"] == "different node")
    assert (entry["here"], entry["kai"]) == ("node-2", "node-0")
    assert 'shadow_decisions_total{outcome="same node"} 3.0' in exposition(registry).decode()
    kai_placed(kube, scheduler, [late])  # KAI binds it after all, late
    scheduler.run_once()
    assert committer.report()["outcomes"] == {"same node": 4, "different node": 1}
    assert outcomes(committer) == {"different node": ["team-a/one-d-0"]}
    assert 'shadow_decisions_total{outcome="bound here only"} 1.0' in exposition(registry).decode()
    assert {call.method for call in kube.calls} <= {"GET", "WATCH"}, "shadow mode writes nothing"


KAI_CONDITION = {"type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "Unschedulable",
                 "message": "Resources were not found for 4 pods", "status": "True", "transitionID": "0",
                 "lastTransitionTime": "2026-01-05T10:00:30Z",
                 "reasons": [{"reason": "PodSchedulingErrors", "message": "node-1 is full"}]}


def kai_wrote(kube: FakeApi, scheduler: Scheduler, pod: str, group: str) -> None:
    """KAI's explanation of a pending pod: its ``PodScheduled=False`` condition and its PodGroup's condition."""
    pod_path, group_path = object_path("", "v1", "pods", "team-a", pod), path("podgroups", {"metadata": {
        "namespace": "team-a", "name": group}})
    raw = kube.objects[pod_path]
    kube.add(pod_path, {**raw, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "gang-b: node-1 is full"}]}})
    raw = kube.objects[group_path]
    kube.add(group_path, {**raw, "status": {"schedulingConditions": [KAI_CONDITION]}})
    seen(scheduler, "podgroups", lambda inf: inf.get(f"team-a/{group}").conditions)
    seen(scheduler, "pods", lambda inf: inf.get(f"team-a/{pod}").unschedulable_message)


@pytest.mark.parametrize("shadow", ["gangs-queues.json"], indirect=True)
def test_each_divergence_has_both_explanations_and_is_listed_by_the_visibility_api(shadow):
    kube, kai, scheduler, _ = shadow
    visibility = Visibility()
    visibility.shadow = scheduler.committer
    scheduler.observer = visibility
    scheduler.run_once()
    kai_wrote(kube, scheduler, "gang-b-3", "gang-b")
    kai["huge-c-0"] = {**kai["one-d-0"], "metadata": {"name": "huge-c-0", "namespace": "team-a"},
                       "spec": {**kai["one-d-0"]["spec"], "podName": "huge-c-0"}}  # KAI placed one we would not
    del kai["gang-b-3"]
    kai_placed(kube, scheduler, kai.values())
    scheduler.run_once()
    entries = {d["pod"]: d for d in scheduler.committer.report()["divergences"]}
    ours = entries["team-a/huge-c-0"]
    assert (ours["outcome"], ours["here"], ours["kai"], ours["why_kai"]) == ("bound by KAI only", None, "node-2", None)
    assert ours["why_here"]["code"] and ours["why_here"]["message"] and ours["why_here"]["details"]["kind"]
    theirs = entries["team-a/gang-b-3"]
    assert (theirs["outcome"], theirs["here"], theirs["why_here"]) == ("bound here only", "node-1", None)
    assert theirs["why_kai"] == {"pod": "gang-b: node-1 is full", "podgroup": {
        "reason": "Unschedulable", "message": "Resources were not found for 4 pods", "node_pool": "default",
        "reasons": KAI_CONDITION["reasons"], "time": "2026-01-05T10:00:30Z"}}

    status, page = visibility.answer(PREFIX + "shadow?limit=1")
    assert status == 200 and page["cycle"] == 2 and page["total"] == 2 and len(page["items"]) == 1
    assert page["outcomes"] == {"bound by KAI only": 1, "bound here only": 1, "same node": 4}
    rest = visibility.answer(PREFIX + "shadow?offset=1&limit=5")[1]["items"]
    assert sorted(d["pod"] for d in page["items"] + rest) == sorted(entries)
    only = visibility.answer(PREFIX + "shadow?outcome=bound%20here%20only")[1]
    assert [d["pod"] for d in only["items"]] == ["team-a/gang-b-3"] and only["total"] == 1
    elsewhere = Visibility()  # a scheduler not in shadow mode has no such route
    elsewhere.view = visibility.view
    assert elsewhere.answer(PREFIX + "shadow")[0] == 404
    assert "shadow" not in elsewhere.answer(PREFIX + "explain/team-a/huge-c")[1]


@pytest.mark.parametrize("shadow", ["gangs-queues.json"], indirect=True)
def test_explain_has_shadow_modes_word_on_the_pods(shadow, capsys):
    kube, kai, scheduler, _ = shadow
    visibility = Visibility()
    visibility.shadow = scheduler.committer
    scheduler.observer = visibility
    scheduler.run_once()
    kai_wrote(kube, scheduler, "gang-b-3", "gang-b")
    del kai["gang-b-3"]
    kai_placed(kube, scheduler, kai.values())
    scheduler.run_once()
    status, body = visibility.answer(PREFIX + "explain/team-a/huge-c")
    assert status == 200 and body["reason"]["code"]
    assert sorted(v["pod"] for v in body["shadow"]["awaiting_kai"]) == [f"team-a/huge-c-{i}" for i in range(3)]
    assert all(v["here"] is None and v["why_here"]["details"] == body["reason"]["details"]
               for v in body["shadow"]["awaiting_kai"])
    status, body = visibility.answer(PREFIX + "explain/team-a/gang-b-3")  # bound here: not pending in the view
    assert status == 404
    assert [(v["pod"], v["here"]) for v in body["shadow"]["awaiting_kai"]] == [("team-a/gang-b-3", "node-1")]
    assert [d["outcome"] for d in body["shadow"]["divergences"]] == ["bound here only"]
    assert print_answer(status, body, as_json=False) == 1
    out = capsys.readouterr().out
    assert "team-a/gang-b-3: would bind to node-1; KAI has not placed it yet" in out
    assert "team-a/gang-b-3: bound here only (here node-1, KAI -)" in out and "KAI: gang-b: node-1 is full" in out
    assert {call.method for call in kube.calls} <= {"GET", "WATCH"}


@pytest.mark.parametrize("shadow", ["gangs-queues.json"], indirect=True)
def test_a_pod_kai_placed_while_the_cycle_ran_gets_no_verdict(shadow):
    kube, kai, scheduler, _ = shadow
    cycle = scheduler.cache.snapshot()
    session = Session(cycle.snapshot, scheduler.plugins).open()
    session.run_actions(list(scheduler.plugins.config.actions))
    kai_placed(kube, scheduler, kai.values())
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
    evicted = next(d for d in report["divergences"] if d["outcome"] == "evicted here only")
    assert evicted["why_here"]["message"] and evicted["why_kai"] is None
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


def test_kai_run_lists_the_divergences_in_the_visibility_api_in_shadow_mode_only():
    from kai.kube.server import METRICS, ObservabilityServer
    from kai.run import serve_visibility

    shadow, plain = Scheduler(None), Scheduler(None)
    shadow.committer = ShadowCommitter(shadow.cache)
    server = ObservabilityServer("127.0.0.1:0", Registry(), routes=(METRICS,))
    try:
        serve_visibility([shadow, plain], server)
        assert isinstance(shadow.observer, Visibility) and shadow.observer.shadow is shadow.committer
        assert isinstance(plain.observer, Visibility) and plain.observer.shadow is None
    finally:
        server.stop()


@pytest.mark.parametrize("shadow", ["gangs-queues.json"], indirect=True)
def test_a_verdict_keeps_the_explanation_of_the_last_cycle_that_left_its_pod_pending(shadow):
    kube, _, scheduler, _ = shadow
    scheduler.run_once()
    committer = scheduler.committer
    assert committer.verdicts["team-a/huge-c-0"].why is None  # worked out only when asked for
    pod_path = object_path("", "v1", "pods", "team-a", "huge-c-0")
    raw = kube.objects[pod_path]
    kube.add(pod_path, {**raw, "spec": {**raw["spec"], "schedulingGates": [{"name": "example.com/wait"}]}})
    seen(scheduler, "pods", lambda inf: inf.get("team-a/huge-c-0").gated)
    scheduler.run_once()  # the pod is gated: not pending in this cycle, nor in the next
    scheduler.run_once()
    why = committer.about("team-a", "huge-c-0")["awaiting_kai"][0]["why_here"]
    assert why is not None and why["details"]["requested"] == 24.0


@pytest.mark.parametrize("shadow", ["gangs-queues.json"], indirect=True)
def test_a_pod_bound_here_only_that_moves_here_and_is_placed_late_by_kai_is_one_divergence(shadow):
    kube, kai, scheduler, _ = shadow
    scheduler.run_once()
    committer = scheduler.committer
    assert isinstance(committer, ShadowCommitter)
    late = kai.pop("gang-b-3")  # KAI leaves it pending while shadow mode would bind it to node-1
    kai_placed(kube, scheduler, kai.values())
    scheduler.run_once()
    assert committer.report()["outcomes"] == {"same node": 4, "bound here only": 1}
    node = copy.deepcopy(next(n for n in read_snapshot(FIXTURES / "gangs-queues.json").objects["nodes"]
                              if n["metadata"]["name"] == "node-1"))
    node.setdefault("spec", {})["unschedulable"] = True
    kube.add(path("nodes", node), node)
    seen(scheduler, "nodes", lambda inf: inf.get("node-1").unschedulable)
    scheduler.run_once()  # shadow mode would now bind it to another node: still bound here only
    assert committer.verdicts["team-a/gang-b-3"].node not in (None, "node-1")
    assert committer.report()["outcomes"] == {"same node": 4, "bound here only": 1}
    kai_placed(kube, scheduler, [late])  # KAI binds it at last, on node-1
    scheduler.run_once()
    assert committer.report()["outcomes"] == {"same node": 4, "different node": 1}
    assert outcomes(committer) == {"different node": ["team-a/gang-b-3"]}
