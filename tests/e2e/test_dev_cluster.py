"""The local control plane itself: kwok nodes and pods, the CRDs, and the dev-cluster command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from kai.dev import cli as devcluster
from kai.dev.controlplane import ControlPlane
from kai.dev.gobuild import K8S_VERSION
from kai.dev.kwokstages import COMPLETE_DELAY_ANNOTATION
from kai.kube.client import Kube
from support import manifests as m
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def created_or_present(create, *args) -> None:
    """``create(*args)`` of an object that other tests of the session (the chart, the scheduler) may have made."""
    try:
        create(*args)
    except ApiException as exc:
        if exc.status != 409:
            raise


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def node_ready(core: client.CoreV1Api, name: str) -> bool:
    conditions = core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def test_pod_on_kwok_node_becomes_running(api_client):
    core = client.CoreV1Api(api_client)
    node_name, pod_name = unique("gpu-node"), unique("pod")
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node_name, "labels": {"type": "kwok"}},
            "status": {"allocatable": resources, "capacity": resources},
        }
    )
    wait_until(lambda: node_ready(core, node_name), timeout=60, what=f"node {node_name} Ready")
    node = core.read_node(node_name)
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert not node.spec.taints  # no not-ready taint: the scheduler may use the node at once

    core.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name},
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            },
        },
    )
    pod = wait_until(
        lambda: (p := core.read_namespaced_pod(pod_name, "default")).status.phase == "Running" and p,
        timeout=60, what=f"pod {pod_name} Running",
    )
    assert pod.status.pod_ip

    core.delete_namespaced_pod(pod_name, "default")
    wait_until(
        lambda: not core.list_namespaced_pod("default", field_selector=f"metadata.name={pod_name}").items,
        timeout=60, what=f"pod {pod_name} deleted",
    )
    core.delete_node(node_name)


def test_controller_manager_acts_through_a_service_account_per_controller(api_client, control_plane):
    core = client.CoreV1Api(api_client)
    ns = unique("sa")
    core.create_namespace({"metadata": {"name": ns}})
    # the ServiceAccount and root-CA controllers fill every new namespace
    wait_until(lambda: core.list_namespaced_service_account(ns, field_selector="metadata.name=default").items,
               timeout=60, what="the namespace's default ServiceAccount")
    root_ca = wait_until(lambda: core.list_namespaced_config_map(ns, field_selector="metadata.name=kube-root-ca.crt")
                         .items, timeout=60, what="the namespace's kube-root-ca.crt")
    assert root_ca[0].data["ca.crt"] == (control_plane.pki / "ca.crt").read_text()
    # --use-service-account-credentials: each controller got its own identity in kube-system
    wanted = {"job-controller", "generic-garbage-collector", "pod-garbage-collector", "resource-claim-controller"}
    wait_until(lambda: wanted <= {a.metadata.name for a in core.list_namespaced_service_account("kube-system").items},
               timeout=60, what=f"the ServiceAccounts {sorted(wanted)}")
    core.delete_namespace(ns)


def test_apiserver_reports_its_version(api_client):
    assert client.VersionApi(api_client).get_code().git_version == f"v{K8S_VERSION}"


@pytest.fixture(scope="module")
def crds(kai_crds):
    return kai_crds


def test_crds_have_kai_names_and_scopes(api_client, crds):
    ext = client.ApiextensionsV1Api(api_client)
    got = {}
    for name in crds:
        spec = ext.read_custom_resource_definition(name).spec
        got[spec.names.kind] = (spec.group, [v.name for v in spec.versions], spec.scope, spec.names.short_names)
    assert got == {
        "Queue": ("scheduling.run.ai", ["v2"], "Cluster", None),
        "PodGroup": ("scheduling.run.ai", ["v2alpha2"], "Namespaced", ["pg"]),
        "BindRequest": ("scheduling.run.ai", ["v1alpha2"], "Namespaced", None),
        "Topology": ("kai.scheduler", ["v1alpha1"], "Cluster", None),
        "SchedulingShard": ("kai.scheduler", ["v1"], "Cluster", None),
        "Config": ("kai.scheduler", ["v1"], "Cluster", None),
    }


def test_queue_and_podgroup_round_trip(api_client, crds):
    custom = client.CustomObjectsApi(api_client)
    for queue in yaml.safe_load_all((DEPLOY / "default-queues.yaml").read_text()):
        created_or_present(custom.create_cluster_custom_object, "scheduling.run.ai", "v2", "queues", queue)
    queue = custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", "default-queue")
    assert queue["spec"]["parentQueue"] == "default-parent-queue"
    assert queue["spec"]["resources"]["gpu"] == {"quota": 0, "limit": -1, "overQuotaWeight": 1}

    spec = {
        "minMember": 2,
        "queue": "default-queue",
        "priorityClassName": "train",
        "preemptibility": "preemptible",
        "markUnschedulable": True,
        "schedulingBackoff": -1,
        "topologyConstraint": {"topology": "cluster-topology", "requiredTopologyLevel": "rack"},
        "subGroups": [{"name": "workers", "minMember": 2, "topologyConstraint": {"preferredTopologyLevel": "host"}}],
    }
    name = unique("pg")
    custom.create_namespaced_custom_object(
        "scheduling.run.ai",
        "v2alpha2",
        "default",
        "podgroups",
        {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": name}, "spec": spec},
    )
    got = custom.get_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "default", "podgroups", name)
    assert got["spec"] == spec  # nothing pruned: every field is in the schema

    status = {
        "resourcesStatus": {"allocated": {"nvidia.com/gpu": "2"}},
        "schedulingConditions": [
            {
                "type": "UnschedulableOnNodePool",
                "nodePool": "default",
                "reasons": [
                    {
                        "reason": "OverLimit",
                        "message": "queue over limit",
                        "details": {"queueDetails": {"name": "default-queue"}},
                    }
                ],
            }
        ],
    }
    custom.patch_namespaced_custom_object_status(
        "scheduling.run.ai", "v2alpha2", "default", "podgroups", name, {"status": status}
    )
    got = custom.get_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "default", "podgroups", name)
    assert got["status"] == status

    with pytest.raises(ApiException) as err:  # the schema is enforced
        custom.create_namespaced_custom_object(
            "scheduling.run.ai",
            "v2alpha2",
            "default",
            "podgroups",
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": unique("pg")},
                "spec": {"minMember": 0, "preemptibility": "sometimes"},
            },
        )
    assert err.value.status == 422


def test_bindrequest_and_topology(api_client, crds):
    custom = client.CustomObjectsApi(api_client)
    spec = {
        "podName": "p",
        "selectedNode": "n",
        "receivedResourceType": "Fraction",
        "receivedGPU": {"count": 1, "portion": "0.5"},
        "selectedGPUGroups": ["g1"],
        "backoffLimit": 3,
    }
    name = unique("br")
    custom.create_namespaced_custom_object(
        "scheduling.run.ai",
        "v1alpha2",
        "default",
        "bindrequests",
        {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest", "metadata": {"name": name}, "spec": spec},
    )
    assert (
        custom.get_namespaced_custom_object("scheduling.run.ai", "v1alpha2", "default", "bindrequests", name)["spec"]
        == spec
    )

    levels = [{"nodeLabel": "cloud.example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]
    custom.create_cluster_custom_object(
        "kai.scheduler",
        "v1alpha1",
        "topologies",
        {
            "apiVersion": "kai.scheduler/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": "t1"},
            "spec": {"levels": levels},
        },
    )
    with pytest.raises(ApiException) as err:  # CEL rule: hostname only as the last level
        custom.create_cluster_custom_object(
            "kai.scheduler",
            "v1alpha1",
            "topologies",
            {
                "apiVersion": "kai.scheduler/v1alpha1",
                "kind": "Topology",
                "metadata": {"name": "t2"},
                "spec": {"levels": levels[::-1]},
            },
        )
    assert err.value.status == 422 and "lowest level" in err.value.body


def test_priority_classes_apply(api_client):
    sched = client.SchedulingV1Api(api_client)
    for pc in yaml.safe_load_all((DEPLOY / "priority-classes.yaml").read_text()):
        created_or_present(sched.create_priority_class, pc)
    values = {pc.metadata.name: pc.value for pc in sched.list_priority_class().items}
    assert {k: values[k] for k in ("train", "build-preemptible", "build", "inference")} == {
        "train": 50,
        "build-preemptible": 75,
        "build": 100,
        "inference": 125,
    }


def test_cli_up_env_status_down(tmp_path, monkeypatch, capsys, control_plane):
    # control_plane: the binaries are built and cached by now, so `up` only starts processes.
    monkeypatch.setenv("KAI_DEV_CLUSTER_DIR", str(tmp_path / "dev"))
    assert devcluster.main(["up"]) == 0
    exports = capsys.readouterr().out
    plane = ControlPlane.attach()
    assert exports == f"export KUBECONFIG={plane.kubeconfig}\n"
    records = list(plane.processes.values())
    assert sorted(r.name for r in records) == ["etcd", "kube-apiserver", "kube-controller-manager", "kwok"]
    assert all(r.is_alive() for r in records)

    assert devcluster.main(["up"]) == 0  # idempotent: reports the running one
    assert capsys.readouterr().out == exports
    assert devcluster.main(["env"]) == 0
    assert capsys.readouterr().out == exports
    assert devcluster.main(["status"]) == 0

    out = subprocess.run(
        ["sh", "-c", 'eval "$(cat)"; echo "$KUBECONFIG"'], input=exports, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str(plane.kubeconfig)

    state_dir = str(tmp_path / "dev")
    assert len(processes_mentioning(state_dir)) == 4
    assert devcluster.main(["down"]) == 0
    assert not any(r.is_alive() for r in records)
    assert processes_mentioning(state_dir) == []
    assert not (tmp_path / "dev").exists()
    assert devcluster.main(["status"]) == 1
    assert control_plane.running() == {"etcd": True, "kube-apiserver": True, "kube-controller-manager": True,
                                       "kwok": True}


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line contains ``text`` (zombies have none)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(entry.name))
        except OSError:
            continue  # exited meanwhile
    return pids


def test_up_without_go_names_what_to_install(tmp_path):
    env = dict(
        os.environ,
        PATH=str(tmp_path / "empty"),
        KAI_CONTROL_PLANE_CACHE=str(tmp_path / "cache"),
        KAI_DEV_CLUSTER_DIR=str(tmp_path / "state"),
    )
    proc = subprocess.run(
        [sys.executable, "-P", "-c", "import sys; from kai.dev.cli import main; sys.exit(main(['up']))"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Go toolchain" in proc.stderr and "install" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_without_job_completion_a_jobs_pod_runs_until_it_is_deleted(tmp_path, control_plane):
    # control_plane: the binaries are built and cached by now
    with ControlPlane(state_dir=tmp_path / "cp", job_pods_complete=False) as plane:
        kube = Kube.connect(plane.kubeconfig)
        m.apply(kube, m.gpu_node("worker", gpus=0))
        m.apply(kube, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sleeper", "namespace": "default"},
                       "spec": {"template": {"spec": {"restartPolicy": "Never", "nodeName": "worker",
                                                      "containers": [{"name": "main", "image": "busybox"}]}}}})

        def pod() -> dict | None:
            items = kube.get("/api/v1/namespaces/default/pods", {"labelSelector": "job-name=sleeper"})["items"]
            return items[0] if items else None

        running = wait_until(lambda: (p := pod()) and p["status"].get("phase") == "Running" and p, 60,
                             "the Job's pod Running")
        time.sleep(3)  # kwok's built-in stages complete a Job's pod at once
        assert pod()["status"]["phase"] == "Running"
        assert [c["type"] for c in running["status"]["conditions"]] == ["Initialized", "Ready", "ContainersReady"]
        kube.request("DELETE", f"/api/v1/namespaces/default/pods/{running['metadata']['name']}")
        wait_until(lambda: (p := pod()) is None or p["metadata"]["uid"] != running["metadata"]["uid"], 60,
                   "the deleted pod removed")


def test_without_job_completion_a_pod_asking_for_it_completes_after_its_delay(tmp_path, control_plane):
    # control_plane: the binaries are built and cached by now
    with ControlPlane(state_dir=tmp_path / "cp", job_pods_complete=False) as plane:
        kube = Kube.connect(plane.kubeconfig)
        m.apply(kube, m.gpu_node("worker", gpus=0))
        template = {"metadata": {"annotations": {COMPLETE_DELAY_ANNOTATION: "3s"}},
                    "spec": {"restartPolicy": "Never", "nodeName": "worker",
                             "containers": [{"name": "main", "image": "busybox"}]}}
        m.apply(kube, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "timed", "namespace": "default"},
                       "spec": {"template": template}})

        def phase() -> str:
            items = kube.get("/api/v1/namespaces/default/pods", {"labelSelector": "job-name=timed"})["items"]
            return items[0]["status"].get("phase", "") if items else ""

        wait_until(lambda: phase() == "Running", 60, "the Job's pod Running")
        started = time.monotonic()
        wait_until(lambda: phase() == "Succeeded", 60, "the Job's pod Succeeded")
        assert time.monotonic() - started > 1.5  # after its delay, not at once

        def complete() -> bool:
            status = kube.get("/apis/batch/v1/namespaces/default/jobs/timed")["status"]
            return any(c["type"] == "Complete" and c["status"] == "True" for c in status.get("conditions", []))

        wait_until(complete, 60, "the Job Complete")
