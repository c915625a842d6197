"""The Helm chart and the Dockerfile, checked without helm or docker.

The chart is rendered by :mod:`support.chart` (Helm's template semantics for the subset the
chart uses); tests/e2e/test_deploy.py applies the rendered manifests to a real API server.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import tomllib

from kai.binder.reservation import NAMESPACE as RESERVATION_NAMESPACE
from kai.kube.access import service_account
from kai.kube.operatorobjects import default_objects
from kai.kube.server import ObservabilityServer
from kai.metrics import Registry
from kai.rbac import chart_template, components, shadow_template
from support.chart import TemplateError, render, render_chart

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "chart" / "kai-scheduler"
CLUSTER_SCOPED = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "PriorityClass", "Queue",
                  "Namespace", "Config", "SchedulingShard"}
KNOWN_KINDS = {
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"), ("apps/v1", "Deployment"), ("v1", "Service"),
    ("v1", "ServiceAccount"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"), ("scheduling.k8s.io/v1", "PriorityClass"),
    ("scheduling.run.ai/v2", "Queue"), ("v1", "Namespace"), ("kai.scheduler/v1", "Config"),
    ("kai.scheduler/v1", "SchedulingShard"), ("batch/v1", "Job"),
}


def by_kind(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.fixture(scope="module")
def docs():
    return render_chart(CHART, namespace="gpu-system")


def test_every_manifest_is_a_known_kind_with_a_name_and_the_right_scope(docs):
    assert docs
    for doc in docs:
        assert (doc["apiVersion"], doc["kind"]) in KNOWN_KINDS, doc["kind"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", doc["metadata"]["name"])
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"]
        else:
            # the binder's reservation pods have their own namespace
            assert doc["metadata"]["namespace"] in ("gpu-system", RESERVATION_NAMESPACE), doc["metadata"]["name"]
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names))


def test_crds_queues_and_priority_classes_are_kai_s(docs):
    assert set(by_kind(docs, "CustomResourceDefinition")) == {
        "queues.scheduling.run.ai", "podgroups.scheduling.run.ai", "bindrequests.scheduling.run.ai",
        "topologies.kai.scheduler", "schedulingshards.kai.scheduler", "configs.kai.scheduler"}
    assert by_kind(docs, "Queue")["default-queue"]["spec"]["parentQueue"] == "default-parent-queue"
    assert {n: d["value"] for n, d in by_kind(docs, "PriorityClass").items()} == {
        "train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    plain = render_chart(CHART, values={"defaultQueues": {"create": False}, "priorityClasses": {"create": False}})
    assert not by_kind(plain, "Queue") and not by_kind(plain, "PriorityClass")


def test_every_component_of_kai_scheduler_run_declares_its_access():
    from kai.run import COMPONENTS

    assert set(components()) == set(COMPONENTS)


def test_rbac_template_is_generated_from_the_components_declarations():
    committed = (CHART / "templates" / "rbac.yaml").read_text()
    assert committed == chart_template(), "regenerate: python -m kai.rbac > .../templates/rbac.yaml"


def test_shadow_mode_runs_the_scheduler_read_only_without_a_lease(docs):
    assert (CHART / "templates" / "rbac-shadow.yaml").read_text() == shadow_template(), \
        "regenerate: python -m kai.rbac shadow > .../templates/rbac-shadow.yaml"
    assert "kai-scheduler-shadow" not in by_kind(docs, "ServiceAccount")  # off by default
    shadow = render_chart(CHART, namespace="gpu-system", values={
        "leaderElection": {"enabled": True},
        "components": {"scheduler": {"shadow": True}, "binder": {"enabled": False},
                       "podgrouper": {"enabled": False}, "podgroup-controller": {"enabled": False},
                       "queue-controller": {"enabled": False}}})
    (deployment,) = by_kind(shadow, "Deployment").values()
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kai-scheduler-shadow"
    args = pod["containers"][0]["args"]
    assert {"--components=scheduler", "--shadow"} <= set(args) and "--leader-elect" not in args
    role = by_kind(shadow, "ClusterRole")["kai-scheduler-shadow"]
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"list", "watch"}
    assert by_kind(shadow, "ClusterRoleBinding")["kai-scheduler-shadow"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "kai-scheduler-shadow", "namespace": "gpu-system"}]
    assert "kai-scheduler-shadow-leader-election" not in by_kind(shadow, "Role")


def test_each_component_gets_least_privilege_rbac_covering_its_declared_access(docs):
    roles, bindings = by_kind(docs, "ClusterRole"), by_kind(docs, "ClusterRoleBinding")
    accounts = by_kind(docs, "ServiceAccount")
    for component, access in components().items():
        name = service_account(component)
        assert name in accounts
        if not access:  # calls no API: no cluster-wide role at all
            assert name not in roles and name not in bindings
            continue
        assert bindings[name]["roleRef"]["name"] == name
        assert bindings[name]["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "gpu-system"}]
        granted = {(g, r, v) for rule in roles[name]["rules"] for g in rule["apiGroups"]
                   for r in rule["resources"] for v in rule["verbs"]}
        wanted = {(a.group, a.resource, v) for a in access for v in a.verbs}
        assert granted == wanted, component  # covers every call, and nothing more
        assert not any("*" in x for rule in roles[name]["rules"] for x in rule["verbs"] + rule["resources"])
    # leases only in the release namespace
    role = by_kind(docs, "Role")["kai-binder-leader-election"]
    assert role["metadata"]["namespace"] == "gpu-system"
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["create", "get", "list", "update", "watch"]}]


def test_deployments_run_each_component_under_its_account_with_probes(docs):
    deployments = by_kind(docs, "Deployment")
    # admission and the node scale adjuster are opt-in
    assert set(deployments) == {f"kai-{c}" for c in components() if c not in ("admission", "node-scale-adjuster")}
    for name, deployment in deployments.items():
        component = name.removeprefix("kai-")
        pod = deployment["spec"]["template"]["spec"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= \
            deployment["spec"]["template"]["metadata"]["labels"].items()
        assert pod["serviceAccountName"] == service_account(component)
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert f"--components={component}" in container["args"]
        assert "--leader-elect" not in container["args"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["image"] == "kai-scheduler:0.2.0"


def test_probe_paths_are_served(docs):
    container = by_kind(docs, "Deployment")["kai-binder"]["spec"]["template"]["spec"]["containers"][0]
    server = ObservabilityServer("127.0.0.1:0", Registry()).start()
    try:
        for probe in ("livenessProbe", "readinessProbe"):
            url = f"http://127.0.0.1:{server.port}{container[probe]['httpGet']['path']}"
            with urllib.request.urlopen(url, timeout=5) as response:
                assert response.status == 200
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/missing", timeout=5)
    finally:
        server.stop()


def test_values_switch_leader_election_replicas_and_components():
    docs = render_chart(CHART, values={
        "leaderElection": {"enabled": True, "leaseDuration": "30s"},
        "components": {"binder": {"replicas": 2, "args": ["--bind-workers=20"]},
                       "queue-controller": {"enabled": False}},
        "image": {"tag": "dev"},
    })
    deployments = by_kind(docs, "Deployment")
    assert "kai-queue-controller" not in deployments and "kai-queue-controller" not in by_kind(docs, "Service")
    binder = deployments["kai-binder"]
    args = binder["spec"]["template"]["spec"]["containers"][0]["args"]
    assert binder["spec"]["replicas"] == 2
    assert "--leader-elect" in args and "--leader-elect-lease-duration=30s" in args
    assert args[-1] == "--bind-workers=20"
    assert binder["spec"]["template"]["spec"]["containers"][0]["image"] == "kai-scheduler:dev"


def test_one_scheduler_serves_every_shard_or_one_deployment_runs_per_listed_shard():
    from kai.run import _parser, scheduling_shards

    (scheduler,) = [d for d in by_kind(render_chart(CHART), "Deployment").values()
                    if d["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduler"]
    args = _parser().parse_args(scheduler["spec"]["template"]["spec"]["containers"][0]["args"])
    assert scheduling_shards(args.scheduling_shard) is None  # every SchedulingShard

    docs = render_chart(CHART, values={"components": {"scheduler": {"shards": ["default", "pool-a"], "replicas": 2}},
                                       "leaderElection": {"enabled": True}})
    deployments = by_kind(docs, "Deployment")
    assert "kai-scheduler" not in deployments and "kai-scheduler" not in by_kind(docs, "Service")
    for shard in ("default", "pool-a"):
        deployment = deployments[f"kai-scheduler-{shard}"]
        pod = deployment["spec"]["template"]
        assert deployment["spec"]["replicas"] == 2
        assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        assert deployment["spec"]["selector"]["matchLabels"]["kai.scheduler/scheduling-shard"] == shard
        assert pod["spec"]["serviceAccountName"] == service_account("scheduler")
        args = _parser().parse_args(pod["spec"]["containers"][0]["args"])
        assert (args.components, scheduling_shards(args.scheduling_shard), args.leader_elect) == (
            "scheduler", [shard], True)
        service = by_kind(docs, "Service")[f"kai-scheduler-{shard}"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert {"kai-binder", "kai-podgrouper"} <= set(deployments)


def test_dockerfile_installs_the_package_and_runs_as_non_root():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert froms and all(re.fullmatch(r"python:3\.\d+-slim", f) for f in froms)
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1].split(":")[0] not in ("0", "root")
    assert re.search(r'^ENTRYPOINT \["kai-scheduler", "run"\]$', text, re.M)
    copied = {src for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M) for src in line.split()[:-1]}
    for source in copied:
        assert (ROOT / source).exists(), source
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = set(pyproject["tool"]["setuptools"]["package-dir"].values()) | {"pyproject.toml", "setup_cython.py"}
    needed.add(pyproject["project"]["readme"])
    assert needed <= copied, needed - copied


# -- the renderer itself -------------------------------------------------------------------------
ROOT_CTX = {"Values": {"a": {"b": "x"}, "on": True, "off": False, "items": {"z": 1, "y": 2}, "list": ["p", "q"],
                       "empty": "", "obj": {"k": [1, 2]}},
            "Release": {"Namespace": "ns"}}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("v: {{ .Values.a.b }}", "v: x"),
        ("v: {{ .Values.a.b | quote }}", 'v: "x"'),
        ("v: {{ .Values.empty | default \"d\" }}", "v: d"),
        ("v: {{ default \"d\" .Values.a.b }}", "v: x"),
        ("a\n  {{- if .Values.on }}\nyes\n{{- else }}\nno\n{{- end }}\n", "a\nyes\n"),
        ("{{- if not .Values.off }}t{{ end }}", "t"),
        ("{{- range $k, $v := .Values.items }}{{ $k }}={{ $v }};{{- end }}", "y=2;z=1;"),
        ("{{- range $v := .Values.list }}{{ $v }}{{ $.Release.Namespace }}{{ end }}", "pnsqns"),
        ("o:{{- toYaml .Values.obj | nindent 2 }}", "o:\n  k:\n  - 1\n  - 2"),
        ("{{/* a comment */}}x", "x"),
        ("{{ eq .Values.a.b \"x\" }}", "true"),
    ],
)
def test_renderer_follows_go_template_semantics(template, expected):
    assert render(template, ROOT_CTX) == expected


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ .Values.nope }}", "has no value"),
        ("{{ include \"x\" . }}", "not supported"),
        ("{{ if .Values.on }}x", "missing"),
        ("{{ .Values.a.b | upper }}", "unknown function"),
        ("{{ range .Values.list }}{{ end }}", "range \\$v"),
        ("{{ $nope }}", "undefined variable"),
        ("{{ .Values.obj }}", "without toYaml"),
        ("x }}", "unbalanced"),
        ("{{ required \"set a.c\" .Values.a.c }}", "set a.c"),
    ],
)
def test_renderer_rejects_what_it_does_not_implement(template, message):
    with pytest.raises(TemplateError, match=message):
        render(template, ROOT_CTX)


def test_renderer_reads_chart_files():
    assert "name: kai-scheduler" in render('{{ .Files.Get "Chart.yaml" }}', {"Files": CHART})
    with pytest.raises(TemplateError, match="no file 'nope.yaml'"):
        render('{{ .Files.Get "nope.yaml" }}', {"Files": CHART})


@pytest.mark.parametrize("values", [{}, {"leaderElection": {"enabled": True}}])
def test_deployment_args_are_flags_of_kai_scheduler_run(values):
    from kai.run import _parser, parse_components

    for deployment in by_kind(render_chart(CHART, values=values), "Deployment").values():
        args = _parser().parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
        assert parse_components(args.components) == [deployment["metadata"]["name"].removeprefix("kai-")]
        assert args.leader_elect is bool(values)


def test_no_deployment_creates_kai_s_operator_objects_the_chart_leaves_out():
    from kai.run import _parser

    values = {"nodeScaleAdjuster": {"enabled": True},
              "components": {"admission": {"enabled": True, "tls": {"caBundle": "Q0E="}}}}
    deployments = by_kind(render_chart(CHART, values=values), "Deployment").values()
    assert len(deployments) == 7
    for deployment in deployments:  # the chart creates them, as its values say
        args = _parser().parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
        assert args.create_default_objects is False, deployment["metadata"]["name"]


def test_kai_s_operator_objects_are_those_kai_scheduler_run_creates_and_kept_on_uninstall(docs):
    rendered = [d for d in docs if d["kind"] in ("Config", "SchedulingShard")]
    assert rendered == default_objects("gpu-system")
    for doc in rendered:
        assert doc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_values_change_kai_s_operator_objects_or_leave_them_out():
    values = {"kaiConfig": {"spec": {"admission": {"gpuSharing": False}}},
              "defaultShard": {"spec": {"placementStrategy": {"gpu": "spread", "cpu": "spread"}, "kValue": 2}}}
    docs = render_chart(CHART, values=values)
    config = by_kind(docs, "Config")["kai-config"]["spec"]
    assert config["namespace"] == "kai-scheduler"
    assert config["admission"] == {"service": {"enabled": True}, "gpuSharing": False}  # laid over the defaults
    assert by_kind(docs, "SchedulingShard")["default"]["spec"] == {
        "partitionLabelValue": "", "goMemLimitRatio": 0.9, "placementStrategy": {"gpu": "spread", "cpu": "spread"},
        "kValue": 2}
    off = render_chart(CHART, values={"kaiConfig": {"create": False}, "defaultShard": {"create": False}})
    assert not by_kind(off, "Config") and not by_kind(off, "SchedulingShard")


ADMISSION = {"components": {"admission": {"enabled": True, "tls": {"mode": "secret", "caBundle": "Q0E="}}}}


def test_admission_is_opt_in_with_its_tls_secret_webhook_port_and_configuration():
    from kai.admission.webhook import MUTATE_PATH, VALIDATE_PATH

    plain = render_chart(CHART)
    assert "kai-admission" not in by_kind(plain, "Deployment")
    assert not by_kind(plain, "ValidatingWebhookConfiguration") and not by_kind(plain, "MutatingWebhookConfiguration")
    with pytest.raises(TemplateError, match="caBundle"):
        render_chart(CHART, values={"components": {"admission": {"enabled": True, "tls": {"mode": "secret"}}}})
    docs = render_chart(CHART, namespace="gpu-system", values=ADMISSION)
    pod = by_kind(docs, "Deployment")["kai-admission"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"--webhook-cert-file=/etc/kai-admission/tls.crt", "--webhook-key-file=/etc/kai-admission/tls.key",
            "--components=admission"} <= set(container["args"])
    assert pod["volumes"] == [{"name": "tls", "secret": {"secretName": "kai-admission-tls"}}]
    assert container["volumeMounts"] == [{"name": "tls", "mountPath": "/etc/kai-admission", "readOnly": True}]
    assert {"name": "webhook", "containerPort": 9443} in container["ports"]
    service = by_kind(docs, "Service")["kai-admission"]
    assert {"name": "webhook", "port": 443, "targetPort": "webhook"} in service["spec"]["ports"]
    hook = by_kind(docs, "ValidatingWebhookConfiguration")["kai-admission"]["webhooks"][0]
    assert hook["name"] == "pod-validation.kai.scheduler" and hook["failurePolicy"] == "Fail"
    assert hook["clientConfig"] == {"service": {"name": "kai-admission", "namespace": "gpu-system",
                                                "path": VALIDATE_PATH, "port": 443}, "caBundle": "Q0E="}
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "gpu-system"]
    assert hook["matchConditions"][0]["expression"] == "object.spec.schedulerName == 'kai-scheduler'"
    (mutating,) = by_kind(docs, "MutatingWebhookConfiguration")["kai-admission"]["webhooks"]
    assert mutating["clientConfig"] == {**hook["clientConfig"], "service": {**hook["clientConfig"]["service"],
                                                                          "path": MUTATE_PATH}}
    assert mutating["rules"][0]["operations"] == ["CREATE"]
    assert mutating["matchConditions"] == hook["matchConditions"]
    assert "volumes" not in by_kind(docs, "Deployment")["kai-binder"]["spec"]["template"]["spec"]
    elected = render_chart(CHART, values={"leaderElection": {"enabled": True}, **ADMISSION})
    args = {name: d["spec"]["template"]["spec"]["containers"][0]["args"]
            for name, d in by_kind(elected, "Deployment").items()}
    assert "--leader-elect" in args["kai-binder"] and "--leader-elect" not in args["kai-admission"]


def test_kai_s_resources_get_validating_webhooks_on_their_crds_coordinates_and_the_admission_paths():
    from kai.admission.webhook import AdmissionServer

    docs = render_chart(CHART, namespace="gpu-system", values=ADMISSION)
    crds = {(crd["spec"]["group"], version["name"], crd["spec"]["names"]["plural"]):
            (crd["spec"]["scope"], crd["spec"]["names"]["kind"].lower())
            for crd in by_kind(docs, "CustomResourceDefinition").values() for version in crd["spec"]["versions"]}
    hooks = {h["name"]: h for h in by_kind(docs, "ValidatingWebhookConfiguration")["kai-admission"]["webhooks"]}
    served = AdmissionServer(":0", hosts=["localhost"]).routes
    assert set(hooks) == {"pod-validation.kai.scheduler", "queue-validation.kai.scheduler",
                          "podgroup-validation.kai.scheduler", "topology-validation.kai.scheduler"}
    for name in ("queue", "podgroup", "topology"):
        hook = hooks[f"{name}-validation.kai.scheduler"]
        (rule,) = hook["rules"]
        (group,), (version,), (plural,) = rule["apiGroups"], rule["apiVersions"], rule["resources"]
        scope, kind = crds[group, version, plural]  # a version of the chart's CRD
        assert scope == rule["scope"], name
        path = hook["clientConfig"]["service"]["path"]  # KAI's (controller-runtime's) path of the kind
        assert path in served and path == f"/validate-{group.replace('.', '-')}-{version}-{kind}"
        assert hook["clientConfig"]["caBundle"] == "Q0E=" and rule["operations"] == ["CREATE", "UPDATE"]
        assert hook["failurePolicy"] == "Ignore" and "namespaceSelector" not in hook
    strict = render_chart(CHART, values={"components": {"admission": {
        **ADMISSION["components"]["admission"],
        "webhooks": {"queues": {"failurePolicy": "Fail"}, "topologies": {"enabled": False}}}}})
    hooks = {h["name"]: h for h in by_kind(strict, "ValidatingWebhookConfiguration")["kai-admission"]["webhooks"]}
    assert hooks["queue-validation.kai.scheduler"]["failurePolicy"] == "Fail"
    assert hooks["podgroup-validation.kai.scheduler"]["failurePolicy"] == "Ignore"
    assert "topology-validation.kai.scheduler" not in hooks


def test_admission_values_become_flags_of_kai_scheduler_run():
    from kai.run import _parser

    args = _parser().parse_args(_container(render_chart(CHART, values=ADMISSION), "admission")["args"])
    assert (args.gpu_sharing_enabled, args.block_nvidia_visible_devices, args.gpu_fraction_runtime_class_name,
            args.enable_quota_validation) == (True, False, "nvidia", False)
    values = {"components": {"admission": {**ADMISSION["components"]["admission"], "gpuSharing": False,
                                           "blockNvidiaVisibleDevices": True, "gpuFractionRuntimeClassName": "",
                                           "queueQuotaValidation": True}}}
    args = _parser().parse_args(_container(render_chart(CHART, values=values), "admission")["args"])
    assert (args.gpu_sharing_enabled, args.block_nvidia_visible_devices, args.gpu_fraction_runtime_class_name,
            args.enable_quota_validation) == (False, True, "", True)


def test_binder_gets_the_reservation_namespace_and_the_reservation_pods_account():
    from kai.binder import reservation

    docs = render_chart(CHART)
    assert reservation.NAMESPACE in by_kind(docs, "Namespace")
    account = by_kind(docs, "ServiceAccount")[reservation.APP]
    assert account["metadata"]["namespace"] == reservation.NAMESPACE
    role = by_kind(docs, "Role")[reservation.APP]
    assert role["metadata"]["namespace"] == reservation.NAMESPACE
    assert {"get", "patch"} <= set(role["rules"][0]["verbs"]) and role["rules"][0]["resources"] == ["pods"]
    binding = by_kind(docs, "RoleBinding")[reservation.APP]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": reservation.APP,
                                    "namespace": reservation.NAMESPACE}]
    assert binding["roleRef"]["name"] == reservation.APP
    off = render_chart(CHART, values={"components": {"binder": {"enabled": False}}})
    assert reservation.NAMESPACE not in by_kind(off, "Namespace")


def test_node_scale_adjuster_is_opt_in_with_the_scaling_pods_namespace_account_and_flags():
    from kai.controllers import nodescaleadjuster
    from kai.run import _parser, parse_components

    plain = render_chart(CHART)
    assert "kai-node-scale-adjuster" not in by_kind(plain, "Deployment")
    assert nodescaleadjuster.NAMESPACE not in by_kind(plain, "Namespace")
    docs = render_chart(CHART, namespace="gpu-system", values={"nodeScaleAdjuster": {
        "enabled": True, "labels": {"team": "ml"}, "args": ["--qps=20"]}, "leaderElection": {"enabled": True}})
    namespace = by_kind(docs, "Namespace")[nodescaleadjuster.NAMESPACE]
    assert namespace["metadata"]["labels"]["team"] == "ml"
    account = by_kind(docs, "ServiceAccount")["kai-scale-adjust"]  # KAI's chart's name for the scaling pods' account
    assert account["metadata"]["namespace"] == nodescaleadjuster.NAMESPACE
    pod = by_kind(docs, "Deployment")["kai-node-scale-adjuster"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == service_account("node-scale-adjuster")
    (container,) = pod["containers"]
    args = _parser().parse_args(container["args"])
    assert parse_components(args.components) == ["node-scale-adjuster"]
    assert (args.scale_adjust_namespace, args.scaling_pod_service_account, args.scaling_pod_image,
            args.gpu_memory_to_fraction_ratio, args.leader_elect, args.qps) == (
        nodescaleadjuster.NAMESPACE, "kai-scale-adjust", "kai-scheduler:0.2.0", 0.1, True, 20.0)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "kai-node-scale-adjuster" in by_kind(docs, "Service")
    for doc in docs:  # namespaced objects in the release namespace or the scaling pods' namespace only
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] in ("gpu-system", RESERVATION_NAMESPACE, nodescaleadjuster.NAMESPACE)


def _container(docs, component):
    return by_kind(docs, "Deployment")[f"kai-{component}"]["spec"]["template"]["spec"]["containers"][0]


def test_metrics_listen_where_the_values_say_and_the_probes_follow():
    from kai.run import _parser

    default = _container(render_chart(CHART), "scheduler")
    args = _parser().parse_args(default["args"])
    assert args.metrics_address == ":8080" and args.health_probe_address == ""  # every interface, as documented
    assert default["livenessProbe"]["httpGet"]["port"] == default["readinessProbe"]["httpGet"]["port"] == "metrics"
    assert [p["name"] for p in default["ports"]] == ["metrics"]

    restricted = _container(render_chart(CHART, values={"metricsBindAddress": "127.0.0.1", "healthProbePort": 8081}),
                            "scheduler")
    args = _parser().parse_args(restricted["args"])
    assert args.metrics_address == "127.0.0.1:8080" and args.health_probe_address == ":8081"
    assert {"name": "health", "containerPort": 8081} in restricted["ports"]
    assert restricted["livenessProbe"]["httpGet"]["port"] == restricted["readinessProbe"]["httpGet"]["port"] == "health"


def test_the_console_is_off_by_default_and_a_value_turns_it_on_behind_a_service():
    from kai.run import _parser

    def consoles(docs):
        return {name: d for name, d in by_kind(docs, "Service").items() if name.endswith("-console")}

    def console_flags(docs):
        return {name: _parser().parse_args(d["spec"]["template"]["spec"]["containers"][0]["args"]).console
                for name, d in by_kind(docs, "Deployment").items()}

    default = render_chart(CHART)
    assert not consoles(default) and not any(console_flags(default).values())

    docs = render_chart(CHART, values={"console": {"enabled": True}})
    assert {name for name, on in console_flags(docs).items() if on} == {"kai-scheduler"}
    (service,) = consoles(docs).values()
    pod = by_kind(docs, "Deployment")["kai-scheduler"]["spec"]["template"]
    assert service["metadata"]["name"] == "kai-scheduler-console" and service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"] == [{"name": "console", "port": 80, "targetPort": "metrics"}]
    assert "metrics" in [p["name"] for p in pod["spec"]["containers"][0]["ports"]]

    sharded = render_chart(CHART, values={"console": {"enabled": True, "service": {"type": "NodePort", "port": 8088}},
                                          "components": {"scheduler": {"shards": ["default", "pool-a"]}}})
    assert {name for name, on in console_flags(sharded).items() if on} == {"kai-scheduler-default",
                                                                           "kai-scheduler-pool-a"}
    services = consoles(sharded)
    assert set(services) == {"kai-scheduler-default-console", "kai-scheduler-pool-a-console"}
    for shard in ("default", "pool-a"):
        service = services[f"kai-scheduler-{shard}-console"]
        pod = by_kind(sharded, "Deployment")[f"kai-scheduler-{shard}"]["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        assert service["spec"]["type"] == "NodePort" and service["spec"]["ports"][0]["port"] == 8088

    assert not consoles(render_chart(CHART, values={"console": {"enabled": True},
                                                    "components": {"scheduler": {"enabled": False}}}))


#: Components that read Secrets through the API. None does: the webhook's certificate is a mounted volume.
SECRET_READERS: set[str] = set()
#: Verbs that let a subject grant itself more than its role (RBAC escalation).
ESCALATING_VERBS = {"escalate", "bind", "impersonate"}


def test_no_role_grants_wildcards_escalation_or_secrets():
    docs = render_chart(CHART, values={"leaderElection": {"enabled": True}, **ADMISSION})
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert {r["metadata"]["name"] for r in roles} >= {"kai-scheduler", "kai-binder", "kai-scheduler-leader-election",
                                                      "kai-resource-reservation"}
    for role in roles:
        name = role["metadata"]["name"]
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule, name
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in value for value in rule.get(field, ())), (name, field, rule)
            assert not ESCALATING_VERBS & set(rule["verbs"]), (name, rule)
            if "" in rule["apiGroups"] and "secrets" in rule["resources"]:
                assert name.removeprefix("kai-") in SECRET_READERS, f"{name} may read Secrets: {rule}"
    names = {(r["kind"], r["metadata"]["name"]) for r in roles}
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        assert (ref["kind"], ref["name"]) in names, f"{binding['metadata']['name']} binds a role of the cluster: {ref}"
