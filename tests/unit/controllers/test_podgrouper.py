"""The podgrouper control loop against an in-memory API: create, compare before write, KAI's kept fields, events.

The real API server is exercised by tests/e2e/test_podgrouper.py.
"""

from __future__ import annotations

import copy
import threading
import time

import pytest

from kai.api.podgroup import NotFoundError
from kai.controllers.grouping_settings import Grouping, GroupingFlags, grouping_builder
from kai.controllers.podgrouper import PodGrouper, desired_update, pod_patch
from kai.grouping.hub import GroupingConfig
from kai.kube.client import ApiError
from kai.kube.kaiconfig import KaiObjects
from kai.kube.objects import KubeObjects
from support.kube import FakeApi

PG_PATH = "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups"
DISCOVERY = {
    "/api/v1": [("Pod", "pods", True), ("Pod", "pods/binding", True), ("Namespace", "namespaces", False)],
    "/apis/batch/v1": [("Job", "jobs", True)],
    "/apis/scheduling.k8s.io/v1": [("PriorityClass", "priorityclasses", False)],
    "/apis/scheduling.run.ai/v2alpha2": [("PodGroup", "podgroups", True)],
}


class FakeKube(FakeApi):
    """The in-memory API with the discovery documents of the kinds the podgrouper reads."""

    def __init__(self) -> None:
        super().__init__()
        for path, resources in DISCOVERY.items():
            self.add(path, {"resources": [{"kind": k, "name": n, "namespaced": ns} for k, n, ns in resources]})

    @property
    def writes(self) -> list[tuple[str, str]]:
        """The writes sent, but Events."""
        return [(c.method, c.path) for c in self.calls if c.method != "GET" and not c.path.endswith("/events")]

    @property
    def reads(self) -> list[str]:
        return self.paths("GET")


class Store(dict):
    def list(self) -> list:
        return list(self.values())


def add(kube: FakeKube, obj: dict, path: str) -> dict:
    return kube.add(path, obj)


def job(kube: FakeKube, name: str = "train", uid: str = "job-uid", **labels) -> dict:
    return add(kube, {"apiVersion": "batch/v1", "kind": "Job",
                      "metadata": {"name": name, "namespace": "ns", "uid": uid, "labels": labels},
                      "spec": {"parallelism": 1}}, f"/apis/batch/v1/namespaces/ns/jobs/{name}")


def pod(kube: FakeKube, name: str = "train-0", owner: dict | None = None, scheduler: str = "kai-scheduler",
        **meta) -> dict:
    refs = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
             "uid": owner["metadata"]["uid"]}] if owner else []
    obj = {"metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid", "ownerReferences": refs, **meta},
           "spec": {"schedulerName": scheduler}}
    return add(kube, obj, f"/api/v1/namespaces/ns/pods/{name}")


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


def grouper(kube: FakeKube) -> PodGrouper:
    g = PodGrouper(kube, arguments={"job": {"searchForLegacyPodGroups": False}})
    g.stores["pods"] = Store({f"ns/{p['metadata']['name']}": p for path, p in kube.objects.items() if "/pods/" in path})
    g.stores["podgroups"] = Store()
    return g


def test_a_pod_gets_its_podgroup_and_annotation_and_a_second_pass_writes_nothing(kube):
    owner = job(kube, **{"kai.scheduler/queue": "team-a"})
    pod(kube, owner=owner)
    g = grouper(kube)
    assert g.handle("ns/train-0") is None
    pg = kube.objects[f"{PG_PATH}/pg-train-job-uid"]
    assert pg["spec"]["queue"] == "team-a" and pg["spec"]["minMember"] == 1
    assert pg["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid"}]
    assert kube.objects["/api/v1/namespaces/ns/pods/train-0"]["metadata"]["annotations"] == {
        "pod-group-name": "pg-train-job-uid"}
    assert [w[0] for w in kube.writes] == ["POST", "PATCH"]

    g.stores["pods"]["ns/train-0"] = kube.objects["/api/v1/namespaces/ns/pods/train-0"]
    g.stores["podgroups"]["ns/pg-train-job-uid"] = pg
    kube.calls.clear()
    assert g.handle("ns/train-0") is None
    assert kube.writes == []
    assert kube.events == []


def test_assigning_a_pod_patches_that_pod_only(kube):
    owner = job(kube)
    pod(kube, owner=owner)
    other = pod(kube, "train-1", owner=owner, annotations={"pod-group-name": "pg-train-job-uid"},
                labels={"kai.scheduler/subgroup-name": "existing-subgroup"})
    before = copy.deepcopy(other["metadata"])
    g = grouper(kube)
    assert g.handle("ns/train-0") is None
    assert [w for w in kube.writes if w[0] == "PATCH"] == [("PATCH", "/api/v1/namespaces/ns/pods/train-0")]
    assert kube.objects["/api/v1/namespaces/ns/pods/train-1"]["metadata"] == before


def test_a_podgroup_the_store_has_not_seen_yet_is_not_written_twice(kube):
    pod(kube, owner=job(kube))
    g = grouper(kube)
    g.handle("ns/train-0")
    kube.calls.clear()
    g.stores["pods"]["ns/train-0"] = kube.objects["/api/v1/namespaces/ns/pods/train-0"]
    assert g.handle("ns/train-0") is None  # the PodGroup it wrote is remembered while the store lags
    assert kube.writes == []

    other = grouper(kube)  # written by another process: the POST meets 409, the PodGroup is read and found equal
    other.stores["pods"]["ns/train-0"] = kube.objects["/api/v1/namespaces/ns/pods/train-0"]
    assert other.handle("ns/train-0") is None
    assert kube.writes == [("POST", PG_PATH)]


def test_an_existing_podgroup_keeps_queue_and_scheduler_fields_and_merges_labels():
    config = GroupingConfig()
    desired = {"metadata": {"name": "pg", "labels": {"a": "1", "kai.scheduler/node-pool": "new"},
                            "annotations": {"x": "y"}, "ownerReferences": [{"uid": "u"}]},
               "spec": {"minMember": 3, "queue": "new-queue", "priorityClassName": "train"}}
    current = {"metadata": {"name": "pg", "resourceVersion": "7", "labels": {"old": "kept", "kai.scheduler/queue": "q"},
                            "ownerReferences": [{"uid": "u"}]},
               "spec": {"minMember": 2, "queue": "old-queue", "markUnschedulable": True, "priorityClassName": "train"},
               "status": {"phase": "Running"}}
    updated = desired_update(current, desired, config)
    assert updated["spec"] == {"minMember": 3, "queue": "old-queue", "markUnschedulable": True,
                               "priorityClassName": "train"}
    # no node-pool label on the existing PodGroup: none is added; the queue label stays; old labels are kept
    assert updated["metadata"]["labels"] == {"old": "kept", "kai.scheduler/queue": "q", "a": "1"}
    assert updated["metadata"]["annotations"] == {"x": "y"}
    assert updated["metadata"]["resourceVersion"] == "7" and updated["status"] == {"phase": "Running"}
    assert desired_update(updated, desired, config) is None


def test_owner_references_or_spec_changes_are_updates():
    base = {"metadata": {"ownerReferences": [{"uid": "a"}]}, "spec": {"minMember": 1}}
    assert desired_update(base, base, GroupingConfig()) is None
    assert desired_update(base, {**base, "metadata": {"ownerReferences": [{"uid": "b"}]}}, GroupingConfig())
    assert desired_update(base, {**base, "spec": {"minMember": 2}}, GroupingConfig())


def test_pod_patch_only_names_what_differs():
    pg = {"metadata": {"name": "pg-1"}}
    p = {"metadata": {"annotations": {"pod-group-name": "pg-1"}, "labels": {}}}
    assert pod_patch(p, pg, None) is None
    assert pod_patch(p, pg, "workers") == {"metadata": {"labels": {"kai.scheduler/subgroup-name": "workers"}}}
    assert pod_patch({"metadata": {}}, pg, None) == {"metadata": {"annotations": {"pod-group-name": "pg-1"}}}


def test_the_pod_patch_names_the_pods_uid_so_a_new_pod_of_the_same_name_is_not_assigned():
    """KAI's specs delete pods and make new ones of the same names at once: a pod grouped from a store still
    holding the old one must not give the new one the old pod's PodGroup (its owner, collected with it)."""
    pg = {"metadata": {"name": "pg-1"}}
    assert pod_patch({"metadata": {"uid": "old"}}, pg, None) == {
        "metadata": {"annotations": {"pod-group-name": "pg-1"}, "uid": "old"}}


def test_a_missing_owner_gives_one_event_naming_it_and_retries_with_backoff(kube):
    ghost = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ghost", "uid": "g-uid"}}
    pod(kube, owner=ghost)
    g = grouper(kube)
    delays = [g.handle("ns/train-0") for _ in range(4)]
    assert delays == [1.0, 2.0, 4.0, 8.0]
    assert len(kube.events) == 1  # the same reason is reported once
    event = kube.events[0]
    assert event["reason"] == "PodGrouperWarning" and event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "train-0"
    assert "ghost" in event["message"] and "not found" in event["message"]
    assert not [w for w in kube.writes if "podgroups" in w[1]]

    job(kube, name="ghost", uid="g-uid")  # the owner appears: grouped, backoff forgotten
    g.reader.forget("batch/v1", "Job", "ns", "ghost")
    assert g.handle("ns/train-0") is None
    assert f"{PG_PATH}/pg-ghost-g-uid" in kube.objects
    assert g._failures == {}


def test_a_pod_being_deleted_without_owner_is_not_reported(kube):
    ghost = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ghost", "uid": "g-uid"}}
    pod(kube, owner=ghost, deletionTimestamp="2026-01-01T00:00:00Z")
    assert grouper(kube).handle("ns/train-0") is None
    assert kube.events == []


def test_other_schedulers_pods_and_user_managed_podgroups_are_left_alone(kube):
    pod(kube, "other", scheduler="default-scheduler")
    pod(kube, "bare", annotations={"pod-group-name": "mine"})
    g = grouper(kube)
    assert g.handle("ns/other") is None and g.handle("ns/bare") is None
    assert kube.writes == []


def test_api_errors_are_retried_without_an_event(kube):
    pod(kube, owner=job(kube))
    g = grouper(kube)
    kube.fail(500, "Internal Server Error", "POST", PG_PATH)
    assert g.handle("ns/train-0") == 1.0
    assert kube.events == []
    assert g.handle("ns/train-0") is None


def test_a_deleted_podgroup_is_made_again_even_just_after_it_was_written(kube):
    pod(kube, owner=job(kube))
    g = grouper(kube)
    g.handle("ns/train-0")
    g.stores["pods"]["ns/train-0"] = kube.objects["/api/v1/namespaces/ns/pods/train-0"]
    deleted = kube.objects.pop(f"{PG_PATH}/pg-train-job-uid")
    g.on_podgroup("DELETED", deleted)
    assert g.queue.get(timeout=0) == "ns/train-0"
    assert g.handle("ns/train-0") is None
    assert f"{PG_PATH}/pg-train-job-uid" in kube.objects


def test_a_deleted_podgroup_requeues_the_pods_naming_it(kube):
    pod(kube, "a", annotations={"pod-group-name": "pg-x"}, ownerReferences=[{"kind": "Job"}])
    pod(kube, "b", annotations={"pod-group-name": "pg-y"}, ownerReferences=[{"kind": "Job"}])
    g = grouper(kube)
    g.on_podgroup("DELETED", {"metadata": {"namespace": "ns", "name": "pg-x"}})
    assert g.queue.get(timeout=0) == "ns/a"
    g.queue.done("ns/a")
    assert g.queue.get(timeout=0) is None


def test_reader_discovers_kinds_caches_owners_and_reads_podgroups_fresh(kube):
    job(kube)
    reader = KubeObjects(kube, ttl=5.0)
    assert reader.get("batch/v1", "Job", "ns", "train")["metadata"]["uid"] == "job-uid"
    reader.get("batch/v1", "Job", "ns", "train")["metadata"]["uid"] = "changed"  # callers get copies
    assert reader.get("batch/v1", "Job", "ns", "train")["metadata"]["uid"] == "job-uid"
    assert kube.reads.count("/apis/batch/v1/namespaces/ns/jobs/train") == 1
    assert kube.reads.count("/apis/batch/v1") == 1
    kube.objects[f"{PG_PATH}/pg"] = {"metadata": {"name": "pg"}}
    reader.get("scheduling.run.ai/v2alpha2", "PodGroup", "ns", "pg")
    reader.get("scheduling.run.ai/v2alpha2", "PodGroup", "ns", "pg")
    assert kube.reads.count(f"{PG_PATH}/pg") == 2
    kube.objects["/apis/scheduling.k8s.io/v1/priorityclasses/train"] = {"metadata": {"name": "train"}}
    assert reader.get("scheduling.k8s.io/v1", "PriorityClass", "ignored", "train")  # cluster-scoped by discovery


def test_reader_names_kinds_and_apis_the_server_does_not_serve(kube):
    reader = KubeObjects(kube)
    with pytest.raises(NotFoundError, match="serves no kind Widget in batch/v1"):
        reader.get("batch/v1", "Widget", "ns", "w")
    with pytest.raises(NotFoundError, match="serves no example.com/v1"):
        reader.get("example.com/v1", "Widget", "ns", "w")
    with pytest.raises(NotFoundError, match='jobs.batch "nope" not found'):
        reader.get("batch/v1", "Job", "ns", "nope")


def test_concurrent_lookups_of_one_owner_make_one_read(kube):
    job(kube)
    slow_get = kube.get

    def get(path, query=None):
        time.sleep(0.05)
        return slow_get(path, query)

    kube.get = get
    reader = KubeObjects(kube)
    threads = [threading.Thread(target=reader.get, args=("batch/v1", "Job", "ns", "train")) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert kube.reads.count("/apis/batch/v1/namespaces/ns/jobs/train") == 1
    assert kube.reads.count("/apis/batch/v1") == 1


def test_a_topology_set_by_someone_else_is_kept_unless_the_podgrouper_names_one():
    current = {"metadata": {}, "spec": {"minMember": 1, "topologyConstraint": {"topology": "dc"}}}
    plain = {"metadata": {}, "spec": {"minMember": 1}}
    assert desired_update(current, plain, GroupingConfig()) is None
    named = {"metadata": {}, "spec": {"minMember": 1, "topologyConstraint": {"topology": "rack"}}}
    assert desired_update(current, named, GroupingConfig())["spec"]["topologyConstraint"] == {"topology": "rack"}


def test_an_owner_asking_to_be_skipped_leaves_the_pod_alone_without_an_event(kube):
    owner = job(kube)
    owner["metadata"]["annotations"] = {"kai.scheduler/skip-podgrouper": "true"}
    pod(kube, owner=owner)
    g = grouper(kube)
    assert g.handle("ns/train-0") is None
    assert kube.writes == [] and kube.events == []


def test_a_pod_asking_to_be_skipped_is_left_alone_and_false_groups_it(kube):
    pod(kube, "skipped", annotations={"kai.scheduler/skip-podgrouper": "true"})
    pod(kube, "grouped", annotations={"kai.scheduler/skip-podgrouper": "false"})
    g = grouper(kube)
    assert g.handle("ns/skipped") is None
    assert kube.writes == [] and kube.events == []
    g.handle("ns/grouped")
    assert kube.writes


def test_reader_lists_a_kind_by_labels_across_namespaces(kube):
    listed = []

    def get(path, query=None):
        if path == "/apis/run.ai/v1alpha1":
            return {"resources": [{"kind": "Karta", "name": "kartas", "namespaced": False}]}
        if path.startswith("/apis/run.ai/"):
            listed.append((path, query))
            return {"items": [{"metadata": {"name": "k"}}]}
        raise ApiError("GET", path, 404, "Not Found")

    kube.get = get
    found = KubeObjects(kube).list("run.ai/v1alpha1", "Karta", "", {"run.ai/karta-kind": "Thing"})
    assert found == [{"metadata": {"name": "k"}}]
    assert listed == [("/apis/run.ai/v1alpha1/kartas", {"labelSelector": "run.ai/karta-kind=Thing"})]
    with pytest.raises(NotFoundError):
        KubeObjects(kube).list("nothing.io/v1", "Nope", "", {})


def test_pods_from_a_list_get_their_kind_back_for_owner_references():
    from kai.controllers.podgrouper import _slim_pod

    listed = {"metadata": {"name": "p", "managedFields": [{"manager": "x"}]}, "spec": {}}
    assert _slim_pod(listed) == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}


def test_new_grouping_settings_are_taken_up_and_every_pod_is_grouped_again(kube):
    owner = job(kube, **{"kai.scheduler/queue": "team-a", "team/queue": "team-b"})
    pod(kube, owner=owner)
    g = grouper(kube)
    flags = GroupingFlags(g.config, search_legacy_pg=False)
    g.settings = KaiObjects(kube, grouping_builder(flags, g.reader, lambda: g.settings.value), Grouping(flags, g.hub),
                            component="pod-grouper", shard=None)
    g.handle("ns/train-0")
    assert kube.objects[f"{PG_PATH}/pg-train-job-uid"]["spec"]["queue"] == "team-a"

    g.settings.value = g.settings.build(None, {"spec": {"global": {"queueLabelKey": "team/queue"}}})
    g.settings.version += 1
    assert g.reconfigure() and len(g.queue) == 1  # the pod, grouped again
    assert g.config.queue_label_key == "team/queue" and not g.reconfigure()
    other = job(kube, "serve", "serve-uid", **{"kai.scheduler/queue": "team-a", "team/queue": "team-b"})
    g.stores["pods"]["ns/serve-0"] = pod(kube, "serve-0", owner=other)
    g.handle("ns/serve-0")
    assert kube.objects[f"{PG_PATH}/pg-serve-serve-uid"]["spec"]["queue"] == "team-b"


def test_pods_of_namespaces_outside_the_namespace_selector_are_not_grouped(kube):
    pod(kube, owner=job(kube))
    g = grouper(kube)
    g.namespace_label_selector = "team=a"
    assert set(g.informers()) == {"pods", "podgroups", "namespaces"}
    assert g.informers()["namespaces"].selectors == {"labelSelector": "team=a"}
    g.stores["namespaces"] = Store()  # ns does not match
    assert g.handle("ns/train-0") is None and kube.writes == []
    g.stores["namespaces"]["ns"] = {"metadata": {"name": "ns", "labels": {"team": "a"}}}
    g.on_namespace("ADDED", g.stores["namespaces"]["ns"])  # it comes to match: its pods are grouped
    assert g.queue.get(timeout=0) == "ns/train-0"
    assert g.handle("ns/train-0") is None and [w[0] for w in kube.writes] == ["POST", "PATCH"]
    assert "namespaces" not in grouper(kube).informers()
