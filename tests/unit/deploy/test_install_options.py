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


def admission(tls: dict, namespace: str = "gpu-system") -> list[dict]:
    return render_chart(CHART, namespace=namespace, values={"components": {"admission": {"enabled": True, "tls": tls}}})


def test_self_managed_tls_is_the_default_and_needs_no_ca_bundle():
    from kai.run import _parser

    docs = admission({})
    pod = of(docs, "Deployment", "kai-admission")["spec"]["template"]["spec"]
    args = _parser().parse_args(pod["containers"][0]["args"])
    assert (args.webhook_cert_file, args.webhook_host, args.webhook_cert_secret, args.webhook_configuration) == (
        None, ["kai-admission.gpu-system.svc"], "kai-admission-tls", "kai-admission")
    assert pod["volumes"] == [{"name": "tls", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]
    assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == args.webhook_cert_dir
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        configuration = of(docs, kind, "kai-admission")
        assert configuration["metadata"]["name"] == args.webhook_configuration
        assert all("caBundle" not in hook["clientConfig"] for hook in configuration["webhooks"])
    # the component may write its own Secret in the release namespace and the two configurations, no more
    role = of(docs, "Role", "kai-admission-certificate")
    assert role["metadata"]["namespace"] == "gpu-system"
    assert {(tuple(r.get("resourceNames", ())), tuple(r["verbs"])) for r in role["rules"]} == {
        ((), ("create",)), (("kai-admission-tls",), ("get", "update"))}
    (rule,) = of(docs, "ClusterRole", "kai-admission-certificate")["rules"]
    assert rule["resourceNames"] == ["kai-admission"] and rule["verbs"] == ["get", "update"]
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        assert of(docs, kind, "kai-admission-certificate")["subjects"][0]["name"] == "kai-admission"


def test_cert_manager_makes_the_certificate_and_injects_the_ca():
    docs = admission({"mode": "certManager"})
    certificate = of(docs, "Certificate", "kai-admission")
    assert certificate["spec"]["secretName"] == "kai-admission-tls"
    assert "kai-admission.gpu-system.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": "kai-admission"}
    assert of(docs, "Issuer", "kai-admission")["spec"] == {"selfSigned": {}}
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        configuration = of(docs, kind, "kai-admission")
        annotations = configuration["metadata"]["annotations"]
        assert annotations == {"cert-manager.io/inject-ca-from": "gpu-system/kai-admission"}
        assert all("caBundle" not in hook["clientConfig"] for hook in configuration["webhooks"])
    container = of(docs, "Deployment", "kai-admission")["spec"]["template"]["spec"]["containers"][0]
    assert "--webhook-cert-file=/etc/kai-admission/tls.crt" in container["args"]
    assert not [d for d in docs if d["metadata"]["name"] == "kai-admission-certificate"]
    issued = admission({"mode": "certManager", "certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "ca"}}})
    assert of(issued, "Certificate", "kai-admission")["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "ca"}
    assert not [d for d in issued if d["kind"] == "Issuer"]


def test_label_selectors_reach_the_podgrouper_and_the_pod_webhooks():
    from kai.run import _parser

    values = {"namespaceLabelSelector": {"team": "a"}, "podLabelSelector": {"kai": "yes", "tier": "gpu"},
              "components": {"admission": {"enabled": True, "queueLabelSelector": True}}}
    docs = render_chart(CHART, namespace="gpu-system", values=values)
    args = _parser().parse_args(of(docs, "Deployment", "kai-podgrouper")["spec"]["template"]["spec"]
                                ["containers"][0]["args"])
    assert (args.pod_label_selector, args.namespace_label_selector) == (["kai=yes", "tier=gpu"], ["team=a"])
    pod_hooks = [of(docs, "ValidatingWebhookConfiguration", "kai-admission")["webhooks"][0],
                 *of(docs, "MutatingWebhookConfiguration", "kai-admission")["webhooks"]]
    for hook in pod_hooks:
        assert hook["namespaceSelector"] == {"matchLabels": {"team": "a"}, "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "gpu-system"]},
            {"key": "kai.scheduler/queue", "operator": "Exists"}]}
        assert hook["objectSelector"] == {"matchLabels": {"kai": "yes", "tier": "gpu"}}
    plain = render_chart(CHART, values={"components": {"admission": {"enabled": True}}})
    args = _parser().parse_args(of(plain, "Deployment", "kai-podgrouper")["spec"]["template"]["spec"]
                                ["containers"][0]["args"])
    assert (args.pod_label_selector, args.namespace_label_selector) == ([], [])
    hook = of(plain, "ValidatingWebhookConfiguration", "kai-admission")["webhooks"][0]
    assert "objectSelector" not in hook and list(hook["namespaceSelector"]) == ["matchExpressions"]
    assert len(hook["namespaceSelector"]["matchExpressions"]) == 1
