"""The Karta fallback: a kind without a podgrouper grouped as its Karta says (KAI's karta grouper and hub tests)."""

import copy

import pytest

from kai.api.podgroup import GroupingError
from kai.grouping.karta import UnsupportedKarta, evaluate, parse_path
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
        karta(podGroups=[{"name": "job", "members": [{"componentName": "pyflow"}]}]),  # deprecated format
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
def test_plain_jq_paths(path, expected):
    assert evaluate({"metadata": {"labels": {"job-name": "a"}}, "items": [1, 2]}, path) == expected


@pytest.mark.parametrize("path", ["", ".. | .metadata.name", ".a | .b", ".a == 1", "metadata", ".a[]", ".a.b?"])
def test_other_jq_is_not_supported(path):
    with pytest.raises(UnsupportedKarta):
        parse_path(path)
