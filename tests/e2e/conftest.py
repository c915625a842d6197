"""End-to-end fixtures: one real control plane (etcd + kube-apiserver + kwok) per test session.

The first run builds the binaries (many minutes, cached afterwards); warm the cache beforehand
with ``kai-scheduler dev-cluster build`` so that no test timeout covers the build.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from kai.cluster.client import ApiError, Kube
from kai.cluster.controlplane import ControlPlane, ControlPlaneError

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
WORKLOAD_CRDS = Path(__file__).resolve().parent / "crds"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: needs a real control plane (etcd, kube-apiserver, kwok)")


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


def apply_crds(kube: Kube, folder: Path, timeout: float = 60.0) -> list[str]:
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
        while not any(c.get("type") == "Established" and c.get("status") == "True"
                      for c in (kube.get(f"{CRD_PATH}/{name}").get("status") or {}).get("conditions") or ()):
            assert time.monotonic() < deadline, f"CRD {name} not established after {timeout:.0f}s"
            time.sleep(0.1)
    return names


@pytest.fixture(scope="session")
def kai_crds(kube: Kube) -> list[str]:
    """The project's CRDs (deploy/crds), established."""
    return apply_crds(kube, DEPLOY / "crds")


@pytest.fixture(scope="session")
def workload_crds(kube: Kube) -> list[str]:
    """CRDs of the workload kinds the podgroupers know (PyTorchJob, RayCluster, JobSet, LeaderWorkerSet),
    established; no controller acts on them."""
    return apply_crds(kube, WORKLOAD_CRDS)
