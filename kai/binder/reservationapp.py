"""The resource-reservation program: what a GPU reservation pod runs (KAI's ``cmd/resourcereservation``).

The device plugin gives the reservation pod one physical GPU. This program finds out which (its UUID,
from NVML through ``nvidia-ml-py`` when that is installed, else from ``nvidia-smi``), writes it into
its own pod's annotation ``run.ai/reserve_for_gpu_index`` -- where the binder reads the device of the
pod's GPU group -- and then sleeps until the pod is stopped. A pod that has the annotation already
(its container restarted) keeps it. The pod is named by the ``POD_NAME`` and ``POD_NAMESPACE``
environment variables the binder sets; the API server is reached as the pod's ServiceAccount, which
needs ``get`` and ``patch`` on pods in its namespace.

Exit status: 0 once stopped (SIGTERM, SIGINT); 1 with a message on standard error when the pod is
not named, no single GPU is visible or the API refuses. Run it as ``kai-resource-reservation`` or
``python -m kai.binder.reservationapp``. Besides the standard library it imports only
:mod:`kai.api.names` (and through it pluggy and attrs), so its image needs no other dependency of
the scheduler.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

from kai.api.names import RESERVED_GPU_INDEX

PROG = "kai-resource-reservation"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
NVIDIA_SMI = ("nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader")

#: Lists the UUIDs of the GPUs this container sees.
DeviceReader = Callable[[], Sequence[str]]


class ReservationError(Exception):
    """Why the program cannot report its GPU; the message is printed as it is."""


class PodApi(Protocol):
    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None: ...


def pod_identity(env: Mapping[str, str]) -> tuple[str, str]:
    """(namespace, name) of the pod this runs in, from ``POD_NAMESPACE`` and ``POD_NAME``."""
    missing = [var for var in ("POD_NAMESPACE", "POD_NAME") if not env.get(var)]
    if missing:
        raise ReservationError(f"environment variable(s) {', '.join(missing)} not set: the binder sets them from "
                               "the pod's metadata (fieldRef)")
    return env["POD_NAMESPACE"], env["POD_NAME"]


def nvml_devices() -> list[str]:
    """The UUIDs of the visible GPUs, from NVML (``nvidia-ml-py``)."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise ReservationError(f"unable to initialize NVML: {exc} (is the NVIDIA driver mounted into the "
                               "container? the pod's runtime class or the device plugin provides it)") from exc
    try:
        uuids = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
            uuids.append(uuid.decode() if isinstance(uuid, bytes) else uuid)
        return uuids
    except pynvml.NVMLError as exc:
        raise ReservationError(f"NVML cannot list the GPUs: {exc}") from exc
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def nvidia_smi_devices(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[str]:
    """The UUIDs of the visible GPUs, from ``nvidia-smi``."""
    try:
        done = run(list(NVIDIA_SMI), capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError as exc:
        raise ReservationError("neither NVML (nvidia-ml-py) nor nvidia-smi is available: cannot tell which GPU "
                               "this pod holds") from exc
    except subprocess.TimeoutExpired as exc:
        raise ReservationError("nvidia-smi did not answer within 60 s") from exc
    if done.returncode != 0:
        why = (done.stderr or done.stdout or "").strip().splitlines()
        raise ReservationError(f"nvidia-smi failed (exit {done.returncode}): {why[0] if why else 'no output'}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def default_reader() -> DeviceReader:
    """NVML when ``nvidia-ml-py`` is installed, else ``nvidia-smi``."""
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return nvidia_smi_devices
    return nvml_devices


def the_device(read: DeviceReader) -> str:
    """The UUID of the one GPU this container sees; ReservationError unless there is exactly one (KAI's rule)."""
    devices = list(read())
    if len(devices) == 1:
        return devices[0]
    if not devices:
        raise ReservationError("no GPU is visible to this container (found 0 devices, 1 was expected): the pod must "
                               "request nvidia.com/gpu on a node whose device plugin hands out GPUs")
    raise ReservationError(f"found {len(devices)} GPU devices, 1 was expected: {', '.join(devices)}")


def report_device(api: PodApi, namespace: str, name: str, read: DeviceReader) -> tuple[str, bool]:
    """Writes the pod's GPU into its annotation unless it is there; returns (device, whether written now)."""
    pod = api.get_pod(namespace, name)
    existing = ((pod.get("metadata") or {}).get("annotations") or {}).get(RESERVED_GPU_INDEX)
    if existing:
        return existing, False
    device = the_device(read)
    api.annotate_pod(namespace, name, RESERVED_GPU_INDEX, device)
    return device, True


class InClusterApi:
    """The two calls the program makes, as the pod's ServiceAccount (standard library only)."""

    def __init__(self, env: Mapping[str, str], account_dir: str = SERVICE_ACCOUNT, timeout: float = 30.0) -> None:
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise ReservationError("not running in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
        self.base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        self.token_path = os.path.join(account_dir, "token")
        try:
            self.context = ssl.create_default_context(cafile=os.path.join(account_dir, "ca.crt"))
        except OSError as exc:
            raise ReservationError(f"cannot read the cluster's CA certificate in {account_dir}: {exc}") from exc
        self.timeout = timeout

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call("GET", self._path(namespace, name))

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None:
        self._call("PATCH", self._path(namespace, name), {"metadata": {"annotations": {key: value}}})

    @staticmethod
    def _path(namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            with open(self.token_path, encoding="utf-8") as f:  # read each time: the kubelet rotates it
                token = f.read().strip()
        except OSError as exc:
            raise ReservationError(f"cannot read the ServiceAccount token: {exc}") from exc
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/merge-patch+json"
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            try:
                detail = json.loads(detail).get("message", detail)
            except ValueError:
                pass
            raise ReservationError(f"{method} {path}: {exc.code} {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ReservationError(f"{method} {path}: {exc}") from exc


def main(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None, api: PodApi | None = None,
         read: DeviceReader | None = None, stop: threading.Event | None = None) -> int:
    """Report the pod's GPU, then sleep until SIGTERM or SIGINT (or ``stop``)."""
    argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1]).parse_args(argv)
    env = os.environ if env is None else env
    try:
        namespace, name = pod_identity(env)
        device, written = report_device(api or InClusterApi(env), namespace, name, read or default_reader())
    except ReservationError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    _log(f"pod {namespace}/{name} holds GPU {device}" + ("" if written else " (reported before)"))
    if stop is None:
        stop = stopped = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopped.set())
    while not stop.wait(3600):
        pass
    _log("stopped")
    return 0


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {PROG}: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
