"""Which placed pods the scheduler binds itself and which go through a BindRequest and the binder."""

from __future__ import annotations

import pytest

from kai.api import TaskStatus
from kai.framework import DEFAULT_CONFIG, Plugins
from kai.framework.shard import BIND_MODES
from kai.scheduler.bindmode import BIND_REQUEST, DIRECT, binder_work
from kai.scheduler.convert import to_task
from kai.scheduler.loop import Scheduler
from kai.scheduler.settings import Settings
from kai.scheduler.views import pod_view
from support.kube import FakeApi

from .test_commit import RecordingKube, cache_for, commit_once, podgroup, wait


def raw_pod(name="p", annotations=None, limits=None, **spec):
    limits = limits if limits is not None else {"nvidia.com/gpu": "1"}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1",
                         "annotations": {"pod-group-name": "g", **(annotations or {})}},
            "spec": {"schedulerName": "kai-scheduler",
                     "containers": [{"resources": {"limits": limits}}],
                     **spec},
            "status": {"phase": "Pending"}}


def work(raw, gpu_groups=()):
    view = pod_view(raw)
    assert view is not None
    return binder_work(view, to_task(view, "ns/g", TaskStatus.PENDING, None), gpu_groups)


def test_a_pod_needing_nothing_at_bind_time_is_plain():
    assert work(raw_pod()) is None
    assert work(raw_pod(limits={})) is None  # no GPU at all
    assert work(raw_pod(limits={"nvidia.com/mig-1g.5gb": "1"})) is None  # MIG: the binder only annotates it


@pytest.mark.parametrize(("raw", "groups", "why"), [
    (raw_pod(annotations={"gpu-fraction": "0.5"}, limits={}), (), "shared GPU"),
    (raw_pod(annotations={"gpu-memory": "2000"}, limits={}), (), "shared GPU"),
    (raw_pod(), ("group-a",), "shared GPU"),
    (raw_pod(resourceClaims=[{"name": "gpu", "resourceClaimName": "claim-a"}]), (), "ResourceClaims"),
    (raw_pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]), (), "volumes"),
    (raw_pod(volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]), (), "volumes"),
])
def test_a_pod_with_bind_time_work_goes_to_the_binder(raw, groups, why):
    assert why in (work(raw, groups) or "")


def test_the_modes_are_the_shards():
    assert (DIRECT, BIND_REQUEST) == BIND_MODES == ("direct", "bindRequest")


def test_a_shared_gpu_pod_goes_through_a_bind_request_while_a_plain_one_is_bound_directly():
    kube = RecordingKube()
    shared = raw_pod("shared", annotations={"gpu-fraction": "0.5"}, limits={})
    plain = raw_pod("plain")
    shared["metadata"]["annotations"]["pod-group-name"] = "gs"
    cache = cache_for(kube, [shared, plain], [podgroup("g"), podgroup("gs")])
    committer, session = commit_once(kube, cache)
    wait(committer)
    assert sorted(d.task.name for d in session.decisions) == ["plain", "shared"]
    assert [b["spec"]["podName"] for b in kube.of("POST", "/bindrequests")] == ["shared"]
    assert [b["metadata"]["name"] for b in kube.of("POST", "/binding")] == ["plain"]


def test_every_pod_goes_through_a_bind_request_in_bind_request_mode():
    kube = RecordingKube()
    cache = cache_for(kube, [raw_pod("plain")], [podgroup("g")])
    wait(commit_once(kube, cache, bind_mode=BIND_REQUEST)[0])
    assert [b["spec"]["podName"] for b in kube.of("POST", "/bindrequests")] == ["plain"]
    assert not kube.of("POST", "/binding")


def test_the_scheduler_takes_the_bind_mode_of_its_settings_up_at_the_next_cycle():
    scheduler = Scheduler(FakeApi(), bind_mode=BIND_REQUEST)
    assert scheduler.committer.bind_mode == BIND_REQUEST

    class Objects:
        version = 1
        value = Settings(Plugins(DEFAULT_CONFIG), None, 1.0, bind_mode=DIRECT)

        @staticmethod
        def describe():
            return "SchedulingShard default"

    scheduler.objects = Objects()  # type: ignore[assignment]
    assert scheduler.reconfigure()
    assert scheduler.committer.bind_mode == DIRECT


def test_a_gang_bound_directly_costs_a_binding_and_an_event_per_pod_and_one_podgroup_write():
    kube = RecordingKube()
    gang = [raw_pod(f"p{i}") for i in range(4)]
    for body in gang:
        body["metadata"]["annotations"]["pod-group-name"] = "gang"
    cache = cache_for(kube, gang, [podgroup("gang", min_member=4)])
    wait(commit_once(kube, cache)[0])
    writes = [(m, p.rsplit("/", 2)[-2] if p.endswith("/binding") else p.rsplit("/", 1)[-1])
              for m, p, _ in kube.calls if m != "GET"]
    assert sorted(writes) == sorted([("POST", f"p{i}") for i in range(4)] + [("POST", "events")] * 4
                                    + [("PATCH", "gang")])
