"""End-to-end fixtures: one real control plane (etcd + kube-apiserver + kwok) per test session.

The first run builds the binaries (many minutes, cached afterwards); warm the cache beforehand
with ``kai-scheduler dev-cluster build`` so that no test timeout covers the build.
"""

from __future__ import annotations

import pytest

from kai.cluster.controlplane import ControlPlane, ControlPlaneError


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
