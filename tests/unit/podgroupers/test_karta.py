"""The Karta fallback: a kind without a podgrouper grouped as its Karta says (KAI's karta grouper and hub tests)."""

import copy

import pytest

from kai.api.podgroup import GroupingError, NotFoundError
from kai.grouping.hub import build_hub
from kai.grouping.karta import KartaLookup, UnsupportedKarta, evaluate, parse_filter, parse_path
from kai.grouping.objects import MemoryObjects
from kai.grouping.podgroups import podgroup_object
from kai.testing_podgroupers import group, obj, pod

UID = "a1b2c3d4-e5f6-7890-abcd-ef1234567890"


def pyflow(workers=2):
    return obj("jobs.example.com/v1", "PyFlow", "pyflow-example", namespace="test-ns", uid=UID,
               spec={"master": {"replicas": 1}, "worker": {"replicas": workers}})


def pyflow_pod(role, name="pyflow-pod", owner=None):
    return pod(name, namespace="test-ns", owner=owner or pyflow(), uid="100",
               labels={"kai.scheduler/queue": "test-queue", "role": role, "job-name": "pyflow-example"})


def child(name, spec=True):
    component = {
        "name": name,
        "ownerRef": "pyflow",
        "scaleDefinition": {"replicasPath": f".spec.{name}.replicas"},
        "podSelector": {"componentTypeSelector": {"keyPath": ".metadata.labels.role", "value": name}},
    }
    if spec:
        component["specDefinition"] = {"podTemplateSpecPath": f".spec.{name}.template"}
    return component


KIND = {"group": "jobs.example.com", "version": "v1", "kind": "PyFlow"}


def karta(pod_group=None, name="pyflow", labels=True, spec=True, **gang):
    gang_scheduling = dict(gang)
    if pod_group is not None:
        gang_scheduling["podGroup"] = pod_group
    meta = {"run.ai/karta-group": "jobs.example.com", "run.ai/karta-version": "v1", "run.ai/karta-kind": "PyFlow"}
    return obj("run.ai/v1alpha1", "Karta", name, namespace="", labels=meta if labels else None, spec={
        "structureDefinition": {
            "rootComponent": {"name": "pyflow", "kind": dict(KIND)},
            "childComponents": [child("master", spec), child("worker", spec)],
        },
        "optimizationInstructions": {"gangScheduling": gang_scheduling or None},
    })


TRAINING = {
    "name": "training",
    "topology": {"topologyName": "rack-topology", "preferredTopologyLevel": "rack", "requiredTopologyLevel": "zone"},
    "subGroups": [
        {"componentName": "master"},
        {
            "componentName": "worker",
            "topology": {"topologyName": "gpu-topology", "preferredTopologyLevel": "host",
                         "requiredTopologyLevel": "rack"},
        },
    ],
}


def test_pod_group_with_a_subgroup_per_component():
    owner = pyflow()
    worker = pyflow_pod("worker", owner=owner)
    metadata = group(worker, owner, karta(TRAINING))
    assert metadata.name == f"pg-{UID}-training"
    assert (metadata.topology.topology, metadata.topology.preferred_level, metadata.topology.required_level) == (
        "rack-topology", "rack", "zone")
    assert (metadata.min_subgroup, metadata.min_available, metadata.queue) == (2, 0, "test-queue")
    assert [(s.name, s.min_available, s.pods) for s in metadata.subgroups] == [
        ("master", 1, []), ("worker", 2, ["pyflow-pod"])]
    assert metadata.subgroups[1].topology.to_dict() == {
        "topology": "gpu-topology", "requiredTopologyLevel": "rack", "preferredTopologyLevel": "host"}
    spec = podgroup_object(metadata)["spec"]
    assert spec["minSubGroup"] == 2 and "minMember" not in spec


def test_pod_group_without_subgroups_is_one_gang_of_the_whole_tree():
    owner = pyflow(workers=1)
    for role in ("master", "worker"):
        metadata = group(pyflow_pod(role, f"pyflow-{role}-pod", owner), owner, karta({"name": "training"}))
        assert (metadata.name, metadata.min_available, metadata.min_subgroup, metadata.subgroups) == (
            f"pg-{UID}-training", 2, None, [])


def test_pod_group_does_not_need_spec_definitions():
    owner = pyflow()
    pod_group = {"name": "training", "subGroups": [{"componentName": "master"}, {"componentName": "worker"}]}
    metadata = group(pyflow_pod("worker", owner=owner), owner, karta(pod_group, spec=False))
    assert [s.pods for s in metadata.subgroups] == [[], ["pyflow-pod"]]


def test_pod_group_takes_precedence_over_the_deprecated_format():
    owner = pyflow()
    alpha = [{"name": "alpha", "members": [{"componentName": "pyflow"}]}]
    pod_group = {"name": "v2", "subGroups": [{"componentName": "worker"}]}
    metadata = group(pyflow_pod("worker", owner=owner), owner, karta(pod_group, podGroups=alpha))
    assert (metadata.name, len(metadata.subgroups), metadata.min_subgroup) == (f"pg-{UID}-v2", 1, 1)


def test_without_scale_definitions_the_components_with_pods_are_counted():
    owner = pyflow()
    bare = karta({"name": "training"})
    for component in bare["spec"]["structureDefinition"]["childComponents"]:
        del component["scaleDefinition"]
    assert group(pyflow_pod("worker", owner=owner), owner, bare).min_available == 2


@pytest.mark.parametrize(
    ("pod_group", "message"),
    [
        ({"name": "t", "subGroups": [{"componentName": ""}]}, "subgroup component name cannot be empty"),
        ({"name": "t", "subGroups": [{"componentName": "ghost"}]}, "component ghost not found"),
        ({"name": "t", "subGroups": [{"componentName": "pyflow"}]}, None),
        ({"name": "t", "topology": {"requiredTopologyLevel": "zone"}}, "must include topology name"),
        ({"name": "t", "topology": {"topologyName": "x"}}, "must include preferred or required topology level"),
    ],
)
def test_invalid_pod_group_instructions_are_errors(pod_group, message):
    owner = pyflow()
    if message is None:  # the root's subtree has a scale: master + worker
        assert group(pyflow_pod("worker", owner=owner), owner, karta(pod_group)).subgroups[0].min_available == 3
        return
    with pytest.raises(GroupingError, match=message):
        group(pyflow_pod("worker", owner=owner), owner, karta(pod_group))


def test_a_component_without_scale_is_an_error_as_a_subgroup():
    owner = pyflow()
    kt = karta({"name": "t", "subGroups": [{"componentName": "master"}]})
    kt["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"] = {"replicasPath": ".spec.nothing"}
    with pytest.raises(GroupingError, match="component master must expose a replica scale definition"):
        group(pyflow_pod("worker", owner=owner), owner, kt)


def default_rules(owner, *objects, **kw):
    return group(pyflow_pod("worker", owner=owner), owner, *objects, **kw)


def test_kinds_without_a_usable_karta_get_the_default_rules():
    owner = pyflow()
    plain = default_rules(owner)
    assert (plain.name, plain.min_available, plain.subgroups) == (f"pg-pyflow-example-{UID}", 1, [])
    deleting = karta(TRAINING)
    deleting["metadata"]["deletionTimestamp"] = "2026-08-01T00:00:00Z"
    invalid = karta(TRAINING)
    invalid["spec"]["structureDefinition"]["childComponents"][0]["podSelector"]["componentTypeSelector"][
        "keyPath"] = ".. | .metadata.name"
    other_kind = karta(TRAINING)
    other_kind["spec"]["structureDefinition"]["rootComponent"]["kind"]["version"] = "v2"
    for unusable in (
        karta(),  # no gang-scheduling instructions
        karta(podGroups=[{"name": "job", "members": [{"componentName": "pyflow", "filters": [".a | .b"]}]}]),
        karta(TRAINING, labels=False),  # not labelled with the kind
        deleting,
        invalid,
        other_kind,
    ):
        assert default_rules(owner, unusable) == plain
    assert default_rules(owner, karta(TRAINING), karta(TRAINING, name="second")) == plain  # two: ambiguous
    assert default_rules(owner, karta(TRAINING), arguments={"default": {"kartaFallback": False}}) == plain


def test_an_invalid_karta_does_not_hide_a_valid_one():
    owner = pyflow()
    invalid = karta(TRAINING, name="invalid")
    invalid["spec"]["structureDefinition"]["childComponents"][0]["podSelector"]["componentTypeSelector"][
        "keyPath"] = ".. | .metadata.name"
    assert default_rules(owner, invalid, karta(TRAINING, name="valid")).name == f"pg-{UID}-training"


@pytest.mark.parametrize("where", [("spec", "structureDefinition", "rootComponent"), ("spec", "structureDefinition"),
                                   ("spec", "optimizationInstructions", "gangScheduling"), ("metadata",)])
def test_a_karta_malformed_at_any_level_is_skipped(where):
    owner = pyflow()
    malformed = copy.deepcopy(karta(TRAINING, name="malformed"))
    parent = malformed
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = ["not", "a", "mapping"]
    assert default_rules(owner, malformed, karta(TRAINING, name="valid")).name == f"pg-{UID}-training"


def test_a_kind_with_a_podgrouper_never_uses_a_karta():
    job = obj("batch/v1", "Job", "train", uid="j1")
    kt = copy.deepcopy(karta(TRAINING))
    kt["metadata"]["labels"] = {"run.ai/karta-group": "batch", "run.ai/karta-version": "v1", "run.ai/karta-kind": "Job"}
    kt["spec"]["structureDefinition"]["rootComponent"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    assert group(pod("train-x", owner=job), job, kt).name == "pg-train-j1"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".", {"metadata": {"labels": {"job-name": "a"}}, "items": [1, 2]}),
        (".metadata.labels[\"job-name\"]", "a"),
        ('.metadata.labels."job-name"', "a"),
        (".items[1]", 2),
        (".items[-1]", 2),
        (".items[5]", None),
        (".metadata.missing.deeper", None),
    ],
)
def test_plain_jq_paths_yield_one_value(path, expected):
    assert evaluate({"metadata": {"labels": {"job-name": "a"}}, "items": [1, 2]}, path) == [expected]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".items[]", [1, 2]),
        (".pools[].replicas", [2, None]),
        (".pools[]", [{"replicas": 2}, {}]),
        (".byName[]", [3, 4]),
        (".items[]", [1, 2]),
        (".empty[]", []),
    ],
)
def test_iterating_paths_yield_a_value_per_element(path, expected):
    obj = {"items": [1, 2], "pools": [{"replicas": 2}, {}], "byName": {"a": 3, "b": 4}, "empty": []}
    assert evaluate(obj, path) == expected


def test_iterating_null_is_an_error():
    with pytest.raises(GroupingError, match="cannot iterate over null"):
        evaluate({}, ".missing[]")


@pytest.mark.parametrize("path", ["", ".. | .metadata.name", ".a | .b", ".a == 1", "metadata", ".a[]?", ".a.b?"])
def test_other_jq_is_not_supported(path):
    with pytest.raises(UnsupportedKarta):
        parse_path(path)


def pools_karta(pod_group, instance_path=".spec.pools[].name", replicas=".spec.pools[].replicas", scale=True):
    """A kind whose ``pool`` component has one instance per entry of ``spec.pools``."""
    pool = {
        "name": "pool",
        "ownerRef": "pyflow",
        "instanceIdPath": instance_path,
        "specDefinition": {"podTemplateSpecPath": ".spec.pools[].template"},
        "podSelector": {"componentTypeSelector": {"keyPath": ".metadata.labels.role", "value": "pool"}},
    }
    if scale:
        pool["scaleDefinition"] = {"replicasPath": replicas, "minReplicasPath": ".spec.pools[].minReplicas"}
    kt = karta(pod_group)
    kt["spec"]["structureDefinition"]["childComponents"] = [child("master"), pool]
    if not scale:
        del kt["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"]
    return kt


def pools_owner(*pools):
    owner = pyflow()
    owner["spec"]["pools"] = [dict(p) for p in pools]
    return owner


def test_a_component_with_several_instances_counts_each_instance():
    owner = pools_owner({"name": "a", "replicas": 2}, {"name": "b", "replicas": 4, "minReplicas": 3})
    pod_group = {"name": "t", "subGroups": [{"componentName": "master"}, {"componentName": "pool"}]}
    metadata = group(pyflow_pod("pool", owner=owner), owner, pools_karta(pod_group))
    assert [(s.name, s.min_available, s.pods) for s in metadata.subgroups] == [
        ("master", 1, []), ("pool", 5, ["pyflow-pod"])]
    assert group(pyflow_pod("pool", owner=owner), owner, pools_karta({"name": "t"})).min_available == 6


def test_without_scale_definitions_each_instance_of_a_component_with_pods_counts_once():
    owner = pools_owner({"name": "a"}, {"name": "b"}, {"name": "c"})
    assert group(pyflow_pod("pool", owner=owner), owner, pools_karta({"name": "t"}, scale=False)).min_available == 4


@pytest.mark.parametrize(
    ("pools", "instance_path", "message"),
    [
        ([{"name": "a", "replicas": 1}], ".spec.pools[].replicas", "must be non-empty strings"),
        ([{"name": "", "replicas": 1}], ".spec.pools[].name", "must be non-empty strings"),
        ([{"name": "a", "replicas": 1}], ".spec.names[]", "cannot iterate over null"),
    ],
)
def test_invalid_instance_ids_are_errors(pools, instance_path, message):
    owner = pools_owner(*pools)
    with pytest.raises(GroupingError, match=message):
        group(pyflow_pod("pool", owner=owner), owner, pools_karta({"name": "t"}, instance_path=instance_path))


def test_instances_and_scales_must_pair_up():
    owner = pools_owner({"name": "a", "replicas": 1}, {"name": "b", "replicas": 1})
    kt = pools_karta({"name": "t"}, instance_path=".spec.pools[0].name")
    with pytest.raises(GroupingError, match="component pool has 1 instance ids but 2 scales"):
        group(pyflow_pod("pool", owner=owner), owner, kt)


class CountingReader(MemoryObjects):
    """Counts the lists of Kartas; ``served`` False answers as an API server without the Karta CRD."""

    def __init__(self, *objects, served=True):
        super().__init__(objects)
        self.lists, self.served = 0, served

    def list(self, api_version, kind, namespace, selector):
        if kind == "Karta":
            self.lists += 1
            if not self.served:
                raise NotFoundError("the API server serves no run.ai/v1alpha1 (looking up kind Karta)")
        return super().list(api_version, kind, namespace, selector)


def test_kartas_are_listed_for_every_pod_so_a_new_karta_counts_at_once():
    owner = pyflow()
    reader = CountingReader(owner)
    hub = build_hub(reader)
    assert hub.metadata(owner, pyflow_pod("worker", owner=owner), []).name == f"pg-pyflow-example-{UID}"
    reader.add(karta(TRAINING))
    assert hub.metadata(owner, pyflow_pod("worker", owner=owner), []).name == f"pg-{UID}-training"
    assert hub.metadata(owner, pyflow_pod("worker", owner=owner), []).name == f"pg-{UID}-training"
    assert reader.lists == 3


def test_without_a_karta_api_kartas_are_listed_again_only_after_a_minute():
    now = [0.0]
    lookup = KartaLookup(clock=lambda: now[0])
    owner = pyflow()
    reader = CountingReader(owner, karta(TRAINING), served=False)
    hub = build_hub(reader)
    assert lookup.karta_for(hub, owner) is None and lookup.karta_for(hub, owner) is None
    assert reader.lists == 1
    now[0] = 61.0
    assert lookup.karta_for(hub, owner) is None and reader.lists == 2
    reader.served = True
    now[0] = 122.0
    assert lookup.karta_for(hub, owner).name == "pyflow" and reader.lists == 3


JOB_NAME = {"name": "job",
            "members": [{"componentName": "pyflow", "groupByKeyPaths": ['.metadata.labels["job-name"]']}]}


def test_the_deprecated_format_names_the_podgroup_by_the_pods_group_by_keys():
    owner = pyflow()
    metadata = group(pyflow_pod("worker", owner=owner), owner, karta(podGroups=[JOB_NAME]))
    assert (metadata.name, metadata.min_available, metadata.min_subgroup, metadata.subgroups) == (
        f"pg-{UID}-pyflow-example", 3, None, [])


def test_the_deprecated_format_refuses_group_by_keys_that_make_an_invalid_name():
    owner = pyflow()
    worker = pyflow_pod("worker", owner=owner)
    worker["metadata"]["labels"]["job-name"] = "Invalid_Name"
    with pytest.raises(GroupingError, match=r"Karta grouping keys \[Invalid_Name\] produce invalid Kubernetes PodGroup "
                                            r"name .*a lowercase RFC 1123 subdomain"):
        group(worker, owner, karta(podGroups=[JOB_NAME]))


def test_the_deprecated_format_needs_a_member_the_pod_passes():
    owner = pyflow()
    masters = [{"name": "job", "members": [{"componentName": "pyflow",
                                            "filters": ['.metadata.labels.role == "master"']}]}]
    with pytest.raises(GroupingError, match="does not match any Karta pod group member definition"):
        group(pyflow_pod("worker", owner=owner), owner, karta(podGroups=masters))
    assert group(pyflow_pod("master", owner=owner), owner, karta(podGroups=masters)).min_available == 3


def test_the_deprecated_format_prefers_the_pods_own_component_and_counts_its_instance():
    owner = pools_owner({"name": "a", "replicas": 2}, {"name": "b", "replicas": 4})
    kt = pools_karta(None)
    kt["spec"]["structureDefinition"]["childComponents"][1]["podSelector"]["componentInstanceSelector"] = {
        "idPath": '.metadata.labels["pool"]'}
    kt["spec"]["optimizationInstructions"]["gangScheduling"] = {"podGroups": [
        {"name": "all", "members": [{"componentName": "pyflow"}]},
        {"name": "pools", "members": [{"componentName": "pool", "groupByKeyPaths": ['.metadata.labels["pool"]']}]},
    ]}
    pool_pod = pyflow_pod("pool", owner=owner)
    pool_pod["metadata"]["labels"]["pool"] = "b"
    metadata = group(pool_pod, owner, kt)
    assert (metadata.name, metadata.min_available) == (f"pg-{UID}-b", 4)
    assert group(pyflow_pod("master", owner=owner), owner, kt).min_available == 7  # the whole tree: 1 + 2 + 4
    pool_pod["metadata"]["labels"]["pool"] = "c"
    with pytest.raises(GroupingError, match="could not match instance id 'c'"):
        group(pool_pod, owner, kt)


@pytest.mark.parametrize("text", ['.a == "x"', ".a != 3", ".a.b", '.metadata.labels["role"] == null'])
def test_member_filters_are_paths_or_comparisons_with_a_literal(text):
    assert parse_filter(text)[0].startswith(".")


@pytest.mark.parametrize("text", [".a == .b", ".a | .b", "(.a == 1) and (.b == 2)", ".a > 1"])
def test_other_member_filters_are_not_supported(text):
    with pytest.raises(UnsupportedKarta):
        parse_filter(text)
