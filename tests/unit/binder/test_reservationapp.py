"""The resource-reservation program with an injected device reader and pod API (no GPU, no cluster here).

tests/e2e/test_binder.py runs it against the real API server as the chart's reservation ServiceAccount.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import threading
import types

import pytest

from kai.binder import reservationapp as app
from kai.binder.reservationapp import (
    ReservationError,
    default_reader,
    nvidia_smi_devices,
    nvml_devices,
    pod_identity,
    report_device,
    the_device,
)

ENV = {"POD_NAMESPACE": "kai-resource-reservation", "POD_NAME": "gpu-reservation-79a9de7e68ba7e9a"}
UUID = "GPU-4c0d7e6c-1f0b-5a43-9c9e-2f8a1a3b5d11"


class FakePodApi:
    """The program's pod API (:class:`~kai.binder.reservationapp.PodApi`): its own pod, and the annotations written."""

    def __init__(self, annotations: dict | None = None) -> None:
        self.pod = {"metadata": {"name": ENV["POD_NAME"], "annotations": dict(annotations or {})}}
        self.patches: list[tuple[str, str, str, str]] = []

    def get_pod(self, namespace, name):
        return self.pod

    def annotate_pod(self, namespace, name, key, value):
        self.patches.append((namespace, name, key, value))
        self.pod["metadata"]["annotations"][key] = value


def no_reading():
    raise AssertionError("the devices must not be read")


def test_the_pod_is_named_by_its_environment():
    assert pod_identity(ENV) == ("kai-resource-reservation", "gpu-reservation-79a9de7e68ba7e9a")
    with pytest.raises(ReservationError, match="POD_NAMESPACE, POD_NAME not set"):
        pod_identity({})


def test_exactly_one_visible_gpu_is_the_pods():
    assert the_device(lambda: [UUID]) == UUID
    with pytest.raises(ReservationError, match=r"no GPU is visible to this container \(found 0 devices"):
        the_device(list)
    with pytest.raises(ReservationError, match="found 2 GPU devices, 1 was expected: GPU-a, GPU-b"):
        the_device(lambda: ["GPU-a", "GPU-b"])


def test_the_device_is_written_into_kais_annotation_once():
    api = FakePodApi()
    assert report_device(api, *pod_identity(ENV), lambda: [UUID]) == (UUID, True)
    assert api.patches == [(*pod_identity(ENV), "run.ai/reserve_for_gpu_index", UUID)]
    # a restarted container finds its device reported and reads no GPU
    assert report_device(api, *pod_identity(ENV), no_reading) == (UUID, False)
    assert len(api.patches) == 1


def test_nvidia_smi_output_and_failures():
    def run(out="", code=0, err=""):
        return lambda argv, **kw: subprocess.CompletedProcess(argv, code, out, err)

    assert nvidia_smi_devices(run(f"{UUID}\n\n")) == [UUID]
    assert nvidia_smi_devices(run("")) == []
    with pytest.raises(ReservationError, match="nvidia-smi failed .exit 9.: NVIDIA-SMI has failed"):
        nvidia_smi_devices(run(code=9, err="NVIDIA-SMI has failed because it couldn't communicate\nmore"))

    def missing(argv, **kw):
        raise FileNotFoundError(argv[0])

    with pytest.raises(ReservationError, match="neither NVML .nvidia-ml-py. nor nvidia-smi is available"):
        nvidia_smi_devices(missing)


class NVMLError(Exception):
    pass


def fake_pynvml(uuids: list, init_error: str | None = None) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    module.NVMLError = NVMLError
    module.shut = []

    def init():
        if init_error:
            raise NVMLError(init_error)

    module.nvmlInit = init
    module.nvmlShutdown = lambda: module.shut.append(True)
    module.nvmlDeviceGetCount = lambda: len(uuids)
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlDeviceGetUUID = lambda handle: uuids[handle]
    return module


def test_nvml_lists_uuids_and_shuts_down(monkeypatch):
    nvml = fake_pynvml([UUID.encode(), "GPU-b"])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert nvml_devices() == [UUID, "GPU-b"]
    assert nvml.shut == [True]
    assert default_reader() is nvml_devices
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], init_error="Driver Not Loaded"))
    with pytest.raises(ReservationError, match="unable to initialize NVML: Driver Not Loaded"):
        nvml_devices()


def test_without_nvidia_ml_py_nvidia_smi_is_asked(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert default_reader() is nvidia_smi_devices


def test_main_reports_then_sleeps_until_stopped(capsys):
    api, stop = FakePodApi(), threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(app.main([], env=ENV, api=api, read=lambda: [UUID],
                                                                     stop=stop)))
    thread.start()
    thread.join(0.3)
    assert thread.is_alive() and api.patches  # reported, and still holding the GPU
    stop.set()
    thread.join(5)
    assert result == [0]
    assert f"holds GPU {UUID}" in capsys.readouterr().err


def test_main_without_a_gpu_or_a_pod_name_exits_1_with_the_reason(capsys):
    stop = threading.Event()
    stop.set()
    assert app.main([], env=ENV, api=FakePodApi(), read=list, stop=stop) == 1
    assert "kai-resource-reservation: no GPU is visible to this container" in capsys.readouterr().err
    assert app.main([], env={}, api=FakePodApi(), read=list, stop=stop) == 1
    assert "POD_NAMESPACE, POD_NAME not set" in capsys.readouterr().err
    assert app.main([], env={**ENV}, read=list, stop=stop) == 1  # the default API needs a cluster
    assert "not running in a cluster" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        app.main(["--sleep"], env=ENV, api=FakePodApi(), read=list, stop=stop)
    assert exited.value.code == 2


def test_the_console_script_runs_this_module():
    (script,) = [e for e in importlib.metadata.entry_points(group="console_scripts")
                 if e.name == "kai-resource-reservation"]
    assert script.value == "kai.binder.reservationapp:main"


def test_the_program_needs_none_of_the_schedulers_dependencies_but_pluggy_and_attrs():
    probe = ("import sys, kai.binder.reservationapp; "
             "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    loaded = set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
                 .stdout.split())
    assert {"kai", "pluggy", "attrs"} <= loaded  # the image installs these two (deploy/images/resource-reservation)
    assert not loaded & {"kubernetes", "urllib3", "orjson", "yaml", "prometheus_client", "pynvml", "Cython"}
