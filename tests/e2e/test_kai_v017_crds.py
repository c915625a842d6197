"""KAI Scheduler v0.17's own example objects on a real API server with the chart's CRDs.

kai-v017-examples/ holds KAI's examples (each file names its source in KAI). The API server takes
every Queue, PodGroup, Topology, SchedulingShard and Config of them as it is, with strict field
validation (an unknown field is an error instead of being dropped), and stores its spec unchanged;
objects KAI's schema refuses are refused. Workloads (Jobs, Pods) of the examples are not created: no
controller runs them here, and a scheduler of another test would take the pods.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from kai.kube.client import ApiError, Kube, object_path
from kai.kube.views import podgroup_view
from kai.scheduler.convert import to_job
from support.cleanup import delete_if_present
from support.manifests import COLLECTIONS

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).with_name("kai-v017-examples")
KINDS = {kind: COLLECTIONS[kind]  # kind: (group, version, plural, namespaced)
         for kind in ("Namespace", "Queue", "PodGroup", "Topology", "SchedulingShard", "Config")}
WORKLOADS = {"Job", "Pod"}
STRICT = {"fieldValidation": "Strict"}


def path(doc: dict, name: str | None = None) -> str:
    group, version, plural, namespaced = KINDS[doc["kind"]]
    assert doc["apiVersion"] == (f"{group}/{version}" if group else version), doc["apiVersion"]
    namespace = (doc["metadata"].get("namespace") or "default") if namespaced else None
    return object_path(group, version, plural, namespace, name)


def example_docs() -> list[tuple[str, dict]]:
    docs = [(p.name, d) for p in sorted(EXAMPLES.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    return [(f, d) for f, d in docs if d["kind"] not in WORKLOADS]


@pytest.fixture(scope="module")
def examples(kube: Kube, kai_crds):
    """Every example object created as it is; ``(file, doc, stored)`` each. Removed afterwards."""
    created = []
    try:
        for file, doc in example_docs():
            created.append((file, doc, kube.request("POST", path(doc), STRICT, doc)))
        yield created
    finally:
        for _, doc, _ in reversed(created):
            delete_if_present(kube, path(doc, doc["metadata"]["name"]))


def test_kai_v017_examples_are_accepted_and_stored_unchanged(examples):
    for file, doc, stored in examples:
        assert stored["metadata"]["name"] == doc["metadata"]["name"], file
        if doc["kind"] != "Namespace":  # the API server adds a namespace's finalizers
            assert stored.get("spec") == doc.get("spec"), (file, doc["metadata"]["name"])  # nothing pruned
    kinds = {doc["kind"] for _, doc, _ in examples}
    assert kinds == set(KINDS)
    specs = [doc.get("spec") or {} for _, doc, _ in examples if doc["kind"] == "PodGroup"]
    assert {"minSubGroup", "preemptionDelay", "stalenessGracePeriod"} <= {k for s in specs for k in s}
    assert any("minSubGroup" in sg for s in specs for sg in s.get("subGroups") or ())
    assert any("alias" in level for _, doc, _ in examples if doc["kind"] == "Topology"
               for level in doc["spec"]["levels"])
    names = {(doc["kind"], doc["metadata"]["name"]) for _, doc, _ in examples}
    assert {("SchedulingShard", "default"), ("Config", "kai-config")} <= names


def test_the_scheduler_reads_the_stored_v017_podgroups(examples):
    for file, doc, stored in examples:
        if doc["kind"] == "PodGroup":
            job = to_job(podgroup_view(stored), 50)
            names = {sg["name"] for sg in stored["spec"].get("subGroups") or ()} or {"default"}
            assert set(job.pod_sets) | set(job.subgroups) == names, file


def _pg(spec):
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {}, "spec": spec}


def _shard(spec):
    return {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {}, "spec": spec}


@pytest.mark.parametrize(("obj", "message"), [
    (_pg({"queue": "q", "preemptibility": "sometimes"}), 'Unsupported value: "sometimes"'),
    (_pg({"queue": "q", "minSubGroup": -1}), "spec.minSubGroup in body should be greater than or equal to 0"),
    (_pg({"subGroups": [{"name": "Workers_1", "minMember": 1}]}), "spec.subGroups[0].name in body should match"),
    (_pg({"subGroups": [{"name": "w", "parent": "Not A Label"}]}), "spec.subGroups[0].parent in body should match"),
    (_pg({"queue": "q", "parallelism": 2}), 'unknown field "spec.parallelism"'),  # gone since KAI v0.17
    ({"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {},
      "spec": {"levels": [{"nodeLabel": "rack"}, {"nodeLabel": "rack"}]}}, "nodeLabel must be unique"),
    (_shard({"usageDBConfig": {"connectionString": "http://prometheus"}}),
     "spec.usageDBConfig.clientType: Required value"),
    (_shard({"usageDBConfig": {"clientType": "prometheus", "usageParams": {"windowSize": "1 hour"}}}),
     "spec.usageDBConfig.usageParams.windowSize in body should match"),
    (_shard({"goMemLimitRatio": 0}), "spec.goMemLimitRatio in body should be greater than 0"),
    ({"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {},
      "spec": {"global": {"vpa": {"updatePolicy": {"updateMode": "Sometimes"}}}}}, 'Unsupported value: "Sometimes"'),
    ({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {},
      "spec": {"resources": {"gpu": {"quota": "lots"}}}}, "spec.resources.gpu.quota in body must be of type number"),
], ids=lambda v: v["kind"] if isinstance(v, dict) else "")
def test_what_kai_v017_s_schema_refuses_is_refused(kube, kai_crds, obj, message):
    obj = {**obj, "metadata": {"name": f"invalid-{uuid.uuid4().hex[:8]}"}}
    with pytest.raises(ApiError) as err:
        kube.request("POST", path(obj), STRICT, obj)
    assert err.value.status in (400, 422), err.value
    assert message in str(err.value)


def test_topology_level_aliases_may_change_but_not_the_levels(kube, examples):
    (network,) = [doc for _, doc, _ in examples if doc["kind"] == "Topology" and doc["metadata"]["name"] == "network"]
    levels = [dict(level) for level in network["spec"]["levels"]]
    levels[0]["alias"] = "rack-row"
    stored = kube.patch(path(network, "network"), {"spec": {"levels": levels}})
    assert stored["spec"]["levels"] == levels
    moved = [{**levels[0], "nodeLabel": "example.com/row"}, levels[1]]
    with pytest.raises(ApiError) as err:
        kube.patch(path(network, "network"), {"spec": {"levels": moved}})
    assert err.value.status == 422 and "nodeLabel structure is immutable" in str(err.value)
