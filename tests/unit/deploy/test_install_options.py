"""The chart's install options beyond the components: the CRD upgrade hook, the admission webhook's
certificates, and the namespace and pod label selectors."""

from __future__ import annotations

from pathlib import Path

from kai.cli import SUBCOMMANDS
from kai.kube import crds
from support.chart import render_chart

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "chart" / "kai-scheduler"
HOOK = {"helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-delete-policy": "hook-succeeded,before-hook-creation"}


def of(docs: list[dict], kind: str, name: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_the_package_ships_the_chart_s_crds():
    chart = sorted((CHART / "crds").glob("*.yaml"))
    assert [p.name for p in chart] == [p.name for p in sorted(crds.FOLDER.glob("*.yaml"))]
    assert all(p.read_bytes() == (crds.FOLDER / p.name).read_bytes() for p in chart)


def test_a_hook_job_applies_the_crds_under_an_account_limited_to_them():
    docs = render_chart(CHART, namespace="gpu-system")
    hook = [d for d in docs if d["metadata"]["name"] == "kai-crd-upgrader"]
    assert sorted(d["kind"] for d in hook) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    for doc in hook:
        assert HOOK.items() <= doc["metadata"]["annotations"].items(), doc["kind"]
    weights = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hook}
    assert weights["Job"] > max(w for kind, w in weights.items() if kind != "Job")  # its account exists first
    (rule,) = of(docs, "ClusterRole", "kai-crd-upgrader")["rules"]
    assert rule["apiGroups"] == ["apiextensions.k8s.io"] and rule["resources"] == ["customresourcedefinitions"]
    assert sorted(rule["resourceNames"]) == sorted(c["metadata"]["name"] for c in crds.shipped())
    assert "delete" not in rule["verbs"]
    pod = of(docs, "Job", "kai-crd-upgrader")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kai-crd-upgrader"
    (container,) = pod["containers"]
    program, subcommand, action = container["command"]
    assert program == "kai-scheduler" and subcommand in SUBCOMMANDS and action == "apply"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    off = render_chart(CHART, values={"crdUpgrade": {"enabled": False}})
    assert not [d for d in off if d["metadata"]["name"] == "kai-crd-upgrader"]
