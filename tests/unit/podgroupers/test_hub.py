"""The grouping hub: owner resolution, choice of podgrouper, PodGroup object and pod assignment."""

import pytest

from kai import hookimpl
from kai.api.podgroup import GroupingError, OwnerReference, PodGroupMetadata, SubGroupMetadata, TopologyConstraint
from kai.grouping.hub import GroupingConfig
from kai.grouping.owners import resolve_owners
from kai.grouping.podgroups import GroupingSkipped, kept_topology, pod_assignment, podgroup_object, skip_reason
from kai.testing_podgroupers import group, hub, obj, pod


def deployment_chain():
    deploy = obj("apps/v1", "Deployment", "web", labels={"kai.scheduler/queue": "serving"})
    rs = obj("apps/v1", "ReplicaSet", "web-7d4b9", owner=deploy)
    return deploy, rs, pod("web-7d4b9-x2x", owner=rs)


def test_owner_chain_is_walked_to_the_top_owner():
    deploy, rs, p = deployment_chain()
    h = hub(p, deploy, rs)
    top, owners = resolve_owners(h.reader, p)
    assert top["metadata"]["name"] == "web"
    assert [o["kind"] for o in owners] == ["ReplicaSet", "Deployment"]


def test_top_owner_kind_selects_the_podgrouper():
    deploy, rs, p = deployment_chain()
    metadata = group(p, deploy, rs)
    assert metadata.name == "pg-web-7d4b9-x2x-uid-web-7d4b9-x2x"  # Deployment: one PodGroup per pod
    assert metadata.queue == "serving"


def test_bare_pod_is_its_own_top_owner():
    p = pod("solo", uid="u1")
    metadata = group(p)
    assert metadata.name == "pg-solo-u1"
    assert metadata.owner.kind == "Pod"


def test_a_bare_pod_is_grouped_as_given_not_as_an_older_pod_of_its_name_reads():
    """KAI's specs delete pods and make new ones of the same names at once: a reader still serving the old pod
    must not name the new pod's PodGroup after the old one (its owner, collected with it)."""
    metadata = group(pod("solo", uid="new"), pod("solo", uid="old"))
    assert metadata.name == "pg-solo-new" and metadata.owner.uid == "new"


def test_missing_owner_is_reported_like_kai():
    job = obj("batch/v1", "Job", "gone", uid="j1")
    with pytest.raises(
        GroupingError, match=r'failed to find Job: <default/gone>, uid: <j1>: jobs.batch "gone" not found'
    ):
        group(pod("p", owner=job))


def test_owner_with_other_uid_is_an_error():
    job = obj("batch/v1", "Job", "train", uid="old")
    recreated = obj("batch/v1", "Job", "train", uid="new")
    with pytest.raises(GroupingError, match="Owner resource with uid old not found"):
        group(pod("p", owner=job), recreated)


def test_owner_with_two_owners_is_an_error():
    a, b = obj("v1", "A", "a"), obj("v1", "B", "b")
    middle = obj("apps/v1", "ReplicaSet", "rs", owner=a)
    middle["metadata"]["ownerReferences"].append({"apiVersion": "v1", "kind": "B", "name": "b", "uid": "uid-b"})
    with pytest.raises(GroupingError, match="found ReplicaSet <rs in namespace default> with multiple owners"):
        group(pod("p", owner=middle), middle, a, b)


def test_owner_references_that_form_a_cycle_are_an_error():
    looped = pod("p", uid="u1")
    looped["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"}]
    with pytest.raises(GroupingError, match="owner references of pod default/p form a cycle: Pod <p>"):
        group(looped)
    a = obj("apps/v1", "ReplicaSet", "a")
    b = obj("apps/v1", "Deployment", "b", owner=a)
    a["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "b", "uid": "uid-b"}]
    with pytest.raises(GroupingError, match="form a cycle: ReplicaSet <a> is reached twice"):
        group(pod("q", owner=a), a, b)


def test_unknown_kind_falls_back_to_default_rules():
    custom = obj("example.com/v1", "Trainer", "t", uid="t1")
    metadata = group(pod("t-0", owner=custom), custom)
    assert (metadata.name, metadata.min_available, metadata.priority_class) == ("pg-t-t1", 1, "train")


class Claim:
    def __init__(self, kinds, name):
        self.kinds, self.name = kinds, name

    @hookimpl
    def kai_podgrouper_kinds(self):
        return self.kinds

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod, owners)
        metadata.name = self.name
        return metadata


def test_version_wildcard_applies_when_no_exact_match():
    h = hub(
        plugins={
            "any": Claim([("example.com", "*", "Thing")], "wild"),
            "v2": Claim([("example.com", "v2", "Thing")], "exact"),
        }
    )
    assert h.podgrouper_for(("example.com", "v1", "Thing")) == "any"
    assert h.podgrouper_for(("example.com", "v2", "Thing")) == "v2"
    assert h.podgrouper_for(("example.com", "v1", "Other")) == "default"


def test_two_podgroupers_claiming_one_kind_is_an_error():
    with pytest.raises(GroupingError, match="both claim apps/v1/Deployment"):
        hub(plugins={"mine": Claim([("apps", "v1", "Deployment")], "x")})


def test_podgrouper_without_metadata_hook_is_an_error():
    class KindsOnly:
        @hookimpl
        def kai_podgrouper_kinds(self):
            return [("example.com", "v1", "Nothing")]

    with pytest.raises(GroupingError, match="implement no kai_podgroup_metadata"):
        hub(plugins={"broken": KindsOnly()})


def test_podgroup_object_and_pod_assignment():
    metadata = PodGroupMetadata(
        name="pg-x",
        namespace="ns",
        owner=obj_ref(),
        min_available=3,
        queue="q",
        priority_class="train",
        preemptibility="preemptible",
        labels={"a": "b"},
        topology=TopologyConstraint("topo", "rack", ""),
        subgroups=[
            SubGroupMetadata("workers", 2, parent="root", pods=["p-1"], topology=TopologyConstraint("topo", "", "node"))
        ],
    )
    pg = podgroup_object(metadata)
    assert pg["apiVersion"] == "scheduling.run.ai/v2alpha2" and pg["kind"] == "PodGroup"
    assert pg["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}]
    assert pg["spec"] == {
        "minMember": 3,
        "queue": "q",
        "priorityClassName": "train",
        "preemptibility": "preemptible",
        "topologyConstraint": {"topology": "topo", "requiredTopologyLevel": "rack"},
        "subGroups": [
            {
                "name": "workers",
                "minMember": 2,
                "parent": "root",
                "topologyConstraint": {"topology": "topo", "preferredTopologyLevel": "node"},
            }
        ],
    }
    subgroup = metadata.subgroup_for_pod("ns", "p-1")
    patch = pod_assignment(pg, subgroup.name)
    assert patch == {"annotations": {"pod-group-name": "pg-x"}, "labels": {"kai.scheduler/subgroup-name": "workers"}}
    assert metadata.subgroup_for_pod("other", "p-1") is None
    assert pod_assignment(pg, None)["labels"] == {}


def obj_ref():
    from kai.api.podgroup import OwnerReference

    return OwnerReference("batch/v1", "Job", "j", "u")


def test_podgroup_copies_the_pods_node_pool_label():
    p = pod("p", labels={"kai.scheduler/node-pool": "a100"})
    pg, subgroup = hub(p).podgroup(p)
    assert pg["metadata"]["labels"]["kai.scheduler/node-pool"] == "a100"
    assert subgroup is None


def test_custom_queue_label_key():
    p = pod("p", labels={"team.example.com/queue": "research"})
    assert group(p, config=GroupingConfig(queue_label_key="team.example.com/queue")).queue == "research"


def test_bare_pod_naming_its_own_podgroup_is_skipped():
    assert skip_reason(pod("p", annotations={"pod-group-name": "mine"}))
    job = obj("batch/v1", "Job", "j")
    assert skip_reason(pod("p", owner=job, annotations={"pod-group-name": "mine"})) is None


SKIP = "kai.scheduler/skip-podgrouper"


def test_a_pod_asking_to_be_skipped_is_left_alone():
    assert skip_reason(pod("p", annotations={SKIP: "true"})) == f'the pod has {SKIP}: "true"'
    assert skip_reason(pod("p", annotations={SKIP: "false"})) is None
    assert skip_reason(pod("p", annotations={SKIP: "True"})) is None  # KAI compares with "true" exactly


@pytest.mark.parametrize("skipped", ["Deployment", "ReplicaSet"])
def test_a_pod_whose_owner_asks_to_be_skipped_is_not_grouped(skipped):
    deploy, rs, p = deployment_chain()
    {"Deployment": deploy, "ReplicaSet": rs}[skipped]["metadata"]["annotations"] = {SKIP: "true"}
    with pytest.raises(GroupingSkipped, match=f'{skipped} default/web.* has {SKIP}: "true"'):
        hub(p, deploy, rs).podgroup(p)


def test_an_owner_skip_annotation_other_than_true_groups_the_pod():
    deploy, rs, p = deployment_chain()
    deploy["metadata"]["annotations"] = {SKIP: "yes"}
    assert group(p, deploy, rs).queue == "serving"


def test_an_existing_topology_constraint_is_kept_when_the_podgrouper_names_none():
    external = {"topology": "cluster", "requiredTopologyLevel": "rack"}
    current = {"minMember": 1, "topologyConstraint": external}
    assert kept_topology(current, {"minMember": 2}) == {"minMember": 2, "topologyConstraint": external}
    # levels without a topology name are replaced as well, as KAI does
    assert kept_topology(current, {"topologyConstraint": {"requiredTopologyLevel": "zone"}}) == {
        "topologyConstraint": external}
    own = {"topology": "other", "preferredTopologyLevel": "host"}
    assert kept_topology(current, {"topologyConstraint": own}) == {"topologyConstraint": own}
    assert kept_topology({}, {"minMember": 2, "topologyConstraint": {"requiredTopologyLevel": "zone"}}) == {
        "minMember": 2}


def test_min_subgroup_replaces_min_member_in_the_podgroup():
    metadata = PodGroupMetadata("pg", "ns", OwnerReference("v1", "Pod", "p", "u"), min_available=0, min_subgroup=2,
                                subgroups=[SubGroupMetadata("a", 0, min_subgroup=1),
                                           SubGroupMetadata("a-0", 3, parent="a")])
    spec = podgroup_object(metadata)["spec"]
    assert (spec["minSubGroup"], "minMember" in spec) == (2, False)
    assert spec["subGroups"] == [{"name": "a", "minSubGroup": 1}, {"name": "a-0", "minMember": 3, "parent": "a"}]
