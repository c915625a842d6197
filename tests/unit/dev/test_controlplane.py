"""ControlPlane process supervision without the real binaries: a restart keeps the command line and the port."""

from __future__ import annotations

import json
import sys
import urllib.request

import pytest

from kai.dev.controlplane import ControlPlane, ControlPlaneError, free_ports


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def plane(tmp_path):
    plane = ControlPlane(state_dir=tmp_path / "state", ready_timeout=20)
    plane.logs.mkdir(parents=True)
    yield plane
    plane.stop()


def test_restart_starts_the_same_command_on_the_same_port_and_records_the_new_process(plane):
    (port,) = free_ports(1)
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    plane._launch("server", argv, lambda: answers(port))
    first = plane.processes["server"]
    assert first.is_alive() and answers(port)

    plane.restart("server")

    second = plane.processes["server"]
    assert second.pid != first.pid
    assert not first.is_alive() and second.is_alive()
    assert answers(port)
    assert open(f"/proc/{second.pid}/cmdline", "rb").read().split(b"\0")[:-1] == [a.encode() for a in argv]
    recorded = json.loads((plane.state_dir / ControlPlane.STATE_FILE).read_text())["processes"]["server"]
    assert recorded["pid"] == second.pid


def test_restart_of_a_process_it_did_not_start_is_an_error_naming_what_it_started(plane):
    with pytest.raises(ControlPlaneError, match="cannot restart 'kube-apiserver'.*started: none"):
        plane.restart("kube-apiserver")


def test_stop_ends_every_process_it_started(plane):
    (port,) = free_ports(1)
    plane._launch("server", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                  lambda: answers(port))
    record = plane.processes["server"]
    plane.stop()
    assert not record.is_alive()
    with pytest.raises(ControlPlaneError):
        plane.restart("server")
