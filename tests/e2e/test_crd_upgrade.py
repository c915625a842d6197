"""``kai-scheduler crds apply`` (the chart's CRD upgrade hook) against the real API server, under the hook's
ServiceAccount: an older KAI CRD is upgraded to the one shipped, the others are left as they are, and the
account may touch KAI's CRDs only."""

from __future__ import annotations

import copy
import uuid

import pytest

from kai.kube import crds
from kai.kube.client import Kube
from support.cleanup import delete_if_present

pytestmark = pytest.mark.e2e

TOPOLOGIES = "topologies.kai.scheduler"


def allowed(kube: Kube, verb: str, name: str) -> bool:
    review = kube.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"group": "apiextensions.k8s.io", "resource": "customresourcedefinitions",
                                        "verb": verb, "name": name}}})
    return review["status"].get("allowed", False)


def levels_schema(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["levels"]


@pytest.fixture
def hook_kubeconfig(component_kubeconfig):
    return str(component_kubeconfig("crd-upgrader"))


def test_an_older_crd_is_upgraded_and_the_unchanged_ones_are_left_alone(kube, kai_crds, hook_kubeconfig, capsys):
    (shipped,) = [c for c in crds.shipped() if c["metadata"]["name"] == TOPOLOGIES]
    older = copy.deepcopy(shipped)
    del levels_schema(older)["items"]["properties"]["alias"]  # a release before the levels' alias
    kube.request("PATCH", f"{crds.CRDS_PATH}/{TOPOLOGIES}", {"fieldManager": "helm", "force": True}, older,
                 content_type=crds.APPLY_PATCH)
    assert "alias" not in levels_schema(kube.get(f"{crds.CRDS_PATH}/{TOPOLOGIES}"))["items"]["properties"]
    before = {name: kube.get(f"{crds.CRDS_PATH}/{name}")["metadata"]["resourceVersion"] for name in kai_crds}

    assert crds.main(["apply", "--kubeconfig", hook_kubeconfig]) == 0

    lines = dict(line.split() for line in capsys.readouterr().out.splitlines())
    assert lines == {name: "upgraded" if name == TOPOLOGIES else "unchanged" for name in kai_crds}
    after = {name: kube.get(f"{crds.CRDS_PATH}/{name}") for name in kai_crds}
    assert "alias" in levels_schema(after[TOPOLOGIES])["items"]["properties"]
    assert {name: crd["metadata"]["resourceVersion"] for name, crd in after.items() if name != TOPOLOGIES} == {
        name: version for name, version in before.items() if name != TOPOLOGIES}
    assert crds.main(["apply", "--kubeconfig", hook_kubeconfig]) == 0  # once upgraded, nothing more to do
    assert set(dict(line.split() for line in capsys.readouterr().out.splitlines()).values()) == {"unchanged"}


def test_a_missing_crd_is_created(kube):
    group = f"crd{uuid.uuid4().hex[:8]}.example.com"
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"widgets.{group}"},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
    try:
        assert crds.apply_all(kube, [crd]) == {f"widgets.{group}": "created"}
        assert crds.apply_all(kube, [crd]) == {f"widgets.{group}": "unchanged"}
    finally:
        delete_if_present(kube, f"{crds.CRDS_PATH}/widgets.{group}")


def test_the_hook_s_account_may_touch_kai_s_crds_only(component_kubeconfig, kai_crds):
    hook = Kube.connect(component_kubeconfig("crd-upgrader"))
    for name in kai_crds:
        assert all(allowed(hook, verb, name) for verb in ("get", "create", "patch")), name
    assert not allowed(hook, "patch", "pytorchjobs.kubeflow.org")
    assert not allowed(hook, "delete", TOPOLOGIES)
    assert not allowed(hook, "list", "")
