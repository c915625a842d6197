"""End-to-end fixtures: one real control plane (etcd + kube-apiserver + kube-controller-manager + kwok)
per test session.

The first run builds the binaries (many minutes, cached afterwards); warm the cache beforehand
with ``kai-scheduler dev-cluster build`` so that no test timeout covers the build.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from kai.dev.controlplane import ControlPlane, ControlPlaneError
from kai.kube.client import ApiError, Kube
from support import manifests as m
from support.waiting import wait_until

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
WORKLOAD_CRDS = Path(__file__).resolve().parent / "crds"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: needs a real control plane (etcd, kube-apiserver, "
                                       "kube-controller-manager, kwok)")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory):
    """A running :class:`ControlPlane`, private to this test session."""
    plane = ControlPlane(state_dir=tmp_path_factory.mktemp("control-plane"))
    try:
        plane.start()
    except ControlPlaneError as exc:
        pytest.fail(f"control plane did not start: {exc}", pytrace=False)
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane):
    """A ``kubernetes`` ApiClient authenticated as the control plane's admin."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    yield client
    client.close()


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Kube:
    """The project's raw JSON client, as the control plane's admin."""
    return Kube.connect(control_plane.kubeconfig)


def _apply_crds(kube: Kube, folder: Path, timeout: float = 60.0) -> list[str]:
    """Creates the CRDs of ``folder`` (those that exist already are kept) and waits until all are established."""
    names = []
    for path in sorted(folder.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        try:
            kube.post(CRD_PATH, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
        names.append(body["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        wait_until(lambda name=name: any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in (kube.get(f"{CRD_PATH}/{name}").get("status") or {}).get("conditions") or ()),
            max(0.0, deadline - time.monotonic()), f"CRD {name} established")
    return names


@pytest.fixture(scope="session")
def kai_crds(kube: Kube) -> list[str]:
    """The project's CRDs (deploy/crds), established."""
    return _apply_crds(kube, DEPLOY / "crds")


@pytest.fixture(scope="session")
def workload_crds(kube: Kube) -> list[str]:
    """CRDs of the workload kinds the podgroupers know (PyTorchJob, RayCluster, JobSet, LeaderWorkerSet), of a
    kind only a Karta describes (KAI's e2e CustomJob) and of the Karta, established; no controller acts on them."""
    return _apply_crds(kube, WORKLOAD_CRDS)


@pytest.fixture(scope="session")
def apply_crds(kube: Kube):
    """``apply_crds(folder)``: creates the CRDs of a folder of YAML files and waits until they are established."""
    return lambda folder: _apply_crds(kube, Path(folder))


# -- the chart installed, components as processes under its ServiceAccounts -----------------------
RELEASE_NAMESPACE = "kai-scheduler"
OPERATOR_KINDS = ("Config", "SchedulingShard")
_PLURALS = {
    "CustomResourceDefinition": "customresourcedefinitions", "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles", "RoleBinding": "rolebindings", "PriorityClass": "priorityclasses", "Queue": "queues",
    "Deployment": "deployments", "Service": "services", "Job": "jobs",
}


def manifest_path(doc: dict, name: str | None = None) -> str:
    """The REST path of ``doc``'s collection (or of the object ``name`` in it)."""
    from kai.kube.client import object_path

    group, _, version = doc["apiVersion"].rpartition("/")
    return object_path(group, version, _PLURALS[doc["kind"]], doc["metadata"].get("namespace"), name)


@pytest.fixture(scope="session")
def chart_object_path():
    """:func:`manifest_path` for test modules (they cannot import this file)."""
    return manifest_path


@pytest.fixture(scope="session")
def kai_chart(kube: Kube, kai_crds: list[str]) -> list[dict]:
    """The chart's manifests applied: its CRDs are deploy/crds (``kai_crds``); Deployments, Services and the
    CRD upgrade hook's Job are only validated with a server-side dry run (the components run as processes
    instead), and KAI's operator objects are left to the tests of their own (each module's components see
    none unless it makes them; test_deploy.py installs them). Returns the docs."""
    from support.chart import render_chart

    docs = render_chart(DEPLOY / "chart" / "kai-scheduler", namespace=RELEASE_NAMESPACE)
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition") == sorted(kai_crds)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}}
    for doc in [namespace, *(d for d in docs if d["kind"] not in ("CustomResourceDefinition", *OPERATOR_KINDS))]:
        dry_run = doc["kind"] in ("Deployment", "Service", "Job")
        try:
            kube.request("POST", manifest_path(doc), {"dryRun": "All"} if dry_run else None, doc)
        except ApiError as exc:
            if exc.status != 409:
                raise
    return docs


@pytest.fixture(scope="session")
def component_kubeconfig(control_plane, kube, kai_chart, tmp_path_factory):
    """``component_kubeconfig("binder")``: a kubeconfig authenticating as the chart's ServiceAccount
    of that component (a token from the TokenRequest API), so its RBAC is what the process gets."""
    from kai.kube.access import service_account
    from kai.kube.client import object_path

    admin = json.loads(Path(control_plane.kubeconfig).read_text())
    made: dict[str, Path] = {}

    def make(component: str) -> Path:
        if component not in made:
            path = object_path("", "v1", "serviceaccounts", RELEASE_NAMESPACE, service_account(component), "token")
            token = kube.post(path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                     "spec": {"expirationSeconds": 3600}})["status"]["token"]
            config = dict(admin, users=[{"name": component, "user": {"token": token}}],
                          contexts=[{"name": component, "context": {"cluster": admin["clusters"][0]["name"],
                                                                    "user": component}}],
                          **{"current-context": component})
            made[component] = tmp_path_factory.mktemp("sa") / f"{component}.kubeconfig"
            made[component].write_text(json.dumps(config))
        return made[component]

    return make


class KaiProcess:
    """One ``kai-scheduler run`` process on a free metrics port, its output in a log file."""

    def __init__(self, args: list[str], kubeconfig: Path, log_path: Path, env: dict[str, str] | None = None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kai.cli", "run", "--kubeconfig", str(kubeconfig),
                 f"--metrics-address=127.0.0.1:{self.port}", *args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/",
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )

    def get(self, path: str) -> tuple[int, str]:
        """(status, body) of GET ``path`` on the metrics port; (0, error) while nothing listens."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def kai_run(tmp_path_factory):
    """``kai_run(args, kubeconfig, name=...)`` starts a :class:`KaiProcess`; the module's are killed at its end.
    It creates KAI's operator objects only when ``args`` say so (``--create-default-objects``), so that each
    module's components see none unless the module makes them."""
    started: list[KaiProcess] = []
    logs = tmp_path_factory.mktemp("kai-run")

    def start(args: list[str], kubeconfig: Path, name: str = "kai", env: dict[str, str] | None = None) -> KaiProcess:
        if not any(arg.startswith("--create-default-objects") for arg in args):
            args = [*args, "--create-default-objects=false"]
        process = KaiProcess(args, kubeconfig, logs / f"{name}-{len(started)}.log", env)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.kill()


@pytest.fixture(scope="module")
def kai_scheduler(kai_run, control_plane, kai_chart, tmp_path_factory):
    """``kai_scheduler(actions, args=...)`` starts the scheduler, the binder and the podgrouper with a configuration
    of ``actions`` and more flags of ``kai-scheduler run``; each must stop cleanly (exit 0) at the module's end if it
    still runs."""
    started: list[KaiProcess] = []

    def start(actions: str, name: str = "scheduler", args: tuple[str, ...] = ()) -> KaiProcess:
        config = tmp_path_factory.mktemp(name) / "config.yaml"
        config.write_text(f"actions: {actions}\n")
        process = kai_run(["--config", str(config), "--components", "scheduler,binder,podgrouper", *args],
                          control_plane.kubeconfig, name=name)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            assert process.terminate() == 0, process.log()[-3000:]


@pytest.fixture
def ns(kube):
    """A namespace for one test; its pods, nodes (label ``e2e=<ns>``) and queues are deleted afterwards (a module
    may have its own)."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(name))
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})
    wait_until(lambda: not kube.get(m.collection("Pod", name)).get("items"), 30, f"the pods of {name} gone")
    kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"e2e={name}"})
    for queue in kube.get(m.collection("Queue"), {"labelSelector": f"e2e={name}"}).get("items", []):
        kube.delete(f"{m.collection('Queue')}/{queue['metadata']['name']}")
