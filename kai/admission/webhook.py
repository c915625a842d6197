"""The admission webhooks for pods (component ``admission``): bad GPU-sharing requests are refused
when the pod is created, with a message naming the field, instead of staying pending; and (mutating,
``POST /mutate--v1-pod``) a new shared-GPU pod gets the ConfigMap references through which the binder
tells it its device (:mod:`kai.binder.gpusharing`).

The check is the scheduler's own, :func:`kai.api.resources.parse_gpu_sharing`, given the pod's
annotations and its ``nvidia.com/gpu`` limit (the first container or init container that sets one,
as KAI's validator does). Refused:

* ``gpu-fraction`` that is not a number or is outside (0, 1];
* ``gpu-fraction`` together with ``gpu-memory``;
* ``gpu-fraction`` or ``gpu-memory`` together with an ``nvidia.com/gpu`` limit;
* ``gpu-fraction-num-devices`` without ``gpu-fraction`` or ``gpu-memory``, or not a positive integer;
* ``gpu-memory`` that is not a positive whole number of MiB.

Only pods with ``spec.schedulerName`` equal to the scheduler's name are judged; others are admitted.
An UPDATE is refused only when it makes the pod invalid: a pod created before the webhook was
registered may still get labels and annotations from the other components.

The server speaks HTTPS (``AdmissionReview`` ``admission.k8s.io/v1`` on ``POST /validate--v1-pod``,
KAI's path; ``GET /healthz`` for probes). Its certificate comes from files, or is made at start for
the given host names by a fresh private CA, whose PEM (:attr:`AdmissionServer.ca_bundle`) goes into
the webhook configuration's ``caBundle``. It accepts TLS 1.2 and 1.3 only.

On stop it accepts no new connection and answers the reviews in progress, for at most
:data:`STOP_TIMEOUT` seconds.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from kai.api.names import SCHEDULER_NAME
from kai.api.resources import GPU, parse_gpu_sharing
from kai.kube.certs import Certificate, serving_certificate
from kai.kube.quantity import parse
from kai.kube.server import HTTPServer, parse_address
from kai.kube.sharedgpu import mutation_patch
from kai.logs import fields

log = logging.getLogger(__name__)

VALIDATE_PATH = "/validate--v1-pod"
MUTATE_PATH = "/mutate--v1-pod"
HEALTH_PATH = "/healthz"
#: KAI's admission server listens on ``--webhook-addr`` ``:9443``.
DEFAULT_ADDRESS = ":9443"
#: An AdmissionReview of one pod is far below this; larger bodies are refused unread.
MAX_BODY = 8 * 1024 * 1024
#: How long a stopping webhook waits for the reviews in progress, seconds.
STOP_TIMEOUT = 2.0
#: The webhook makes no API calls: the API server calls it (see kai.kube.access).
API_ACCESS: tuple = ()


def gpu_limit(spec: dict) -> float:
    """The ``nvidia.com/gpu`` limit of the first container (then init container) that sets one; 0 without."""
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        limits = (container.get("resources") or {}).get("limits") or {}
        if GPU in limits:
            return float(parse(limits[GPU]))
    return 0.0


def pod_problem(pod: dict | None, scheduler_name: str = SCHEDULER_NAME) -> str | None:
    """Why the pod's GPU-sharing request is malformed, or None (also for other schedulers' pods)."""
    if not isinstance(pod, dict):
        return None
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") != scheduler_name:
        return None
    try:
        parse_gpu_sharing((pod.get("metadata") or {}).get("annotations") or {}, gpu_limit(spec))
    except ValueError as exc:  # GpuRequestError names the annotation; QuantityError the limit
        return str(exc)
    return None


def review(request: dict, scheduler_name: str = SCHEDULER_NAME) -> dict:
    """The ``response`` of an AdmissionReview for its ``request``."""
    response: dict = {"uid": request.get("uid", ""), "allowed": True}
    if request.get("kind", {}).get("kind", "Pod") != "Pod" or request.get("operation") not in ("CREATE", "UPDATE"):
        return response
    problem = pod_problem(request.get("object"), scheduler_name)
    if problem is not None and request.get("operation") == "UPDATE":
        if pod_problem(request.get("oldObject"), scheduler_name) == problem:
            problem = None  # the update does not change what is wrong
    if problem is None:
        return response
    name = request.get("name") or ((request.get("object") or {}).get("metadata") or {}).get("generateName", "")
    pod = f"{request.get('namespace', '')}/{name}"
    log.info("refused pod", **fields(pod=pod, operation=request.get("operation"), reason=problem))
    return {**response, "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": f"invalid GPU request of pod {pod}: {problem}"}}


def mutation_review(request: dict, scheduler_name: str = SCHEDULER_NAME) -> dict:
    """The ``response`` of a mutating AdmissionReview: a new shared-GPU pod is prepared for the binder
    (:mod:`kai.binder.gpusharing`); a pod naming a missing fraction container is refused."""
    response: dict = {"uid": request.get("uid", ""), "allowed": True}
    pod = request.get("object")
    if (request.get("kind", {}).get("kind", "Pod") != "Pod" or request.get("operation") != "CREATE"
            or not isinstance(pod, dict) or (pod.get("spec") or {}).get("schedulerName") != scheduler_name):
        return response
    meta = pod.get("metadata") or {}
    name = f"{request.get('namespace', '')}/{request.get('name') or meta.get('name') or meta.get('generateName', '')}"
    try:
        patch = mutation_patch(pod)
    except ValueError as exc:
        log.info("refused pod", **fields(pod=name, operation="CREATE", reason=str(exc)))
        return {**response, "allowed": False,
                "status": {"code": 403, "reason": "Forbidden", "message": f"invalid GPU request of pod {name}: {exc}"}}
    if patch:
        response.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(patch).encode()).decode())
    return response


class AdmissionServer:
    """The ``admission`` component; ``start()`` binds and serves, ``run(stop)`` serves until ``stop`` is set.

    Give ``cert_file`` and ``key_file``, or ``hosts`` (DNS names, IP addresses) for a certificate made
    at start in ``cert_dir`` (default: a temporary folder).
    """

    name = "admission"

    def __init__(self, address: str = DEFAULT_ADDRESS, *, scheduler_name: str = SCHEDULER_NAME,
                 cert_file: str | None = None, key_file: str | None = None, hosts: list[str] | None = None,
                 cert_dir: str | None = None) -> None:
        if bool(cert_file) != bool(key_file):
            raise ValueError("give both a certificate file and its key file, or neither")
        if not cert_file and not hosts:
            raise ValueError("the admission webhook needs certificate files or host names for its own certificate")
        self.address = parse_address(address)
        self.scheduler_name = scheduler_name
        self.cert_file, self.key_file = cert_file, key_file
        self.hosts = list(hosts or ())
        self.cert_dir = cert_dir
        self.certificate: Certificate | None = None
        self._httpd: HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._httpd is not None, "not started"
        return self._httpd.server_address[1]

    @property
    def ca_bundle(self) -> str | None:
        """base64 PEM of the CA of a certificate made at start (None with certificate files)."""
        return self.certificate.ca_bundle() if self.certificate is not None else None

    def ready(self) -> tuple[bool, str]:
        """Readiness: the HTTPS server is listening."""
        return (True, f"serving on port {self.port}") if self._httpd is not None else (False, "not serving yet")

    def start(self) -> AdmissionServer:
        if self._httpd is not None:
            return self
        cert_file, key_file = self.cert_file, self.key_file
        if not cert_file:
            folder = Path(self.cert_dir or tempfile.mkdtemp(prefix="kai-admission-"))
            self.certificate = serving_certificate(folder, self.hosts)
            cert_file, key_file = str(self.certificate.cert_file), str(self.certificate.key_file)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert_file, key_file)
        httpd = HTTPServer(self.address, _handler(self.scheduler_name))
        # the handshake happens on the request's thread, under its timeout, not in the accept loop
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="admission", daemon=True)
        self._thread.start()
        log.info("admission webhook serving", **fields(address=f"{self.address[0]}:{self.port}", path=VALIDATE_PATH,
                                                       ca_bundle=self.ca_bundle))
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Accepts nothing new and answers the reviews in progress, waiting at most ``timeout`` seconds."""
        if self._httpd is not None:
            if not self._httpd.drain(timeout):
                log.warning("admission webhook stopped with reviews unanswered", **fields(timeout_seconds=timeout))
            self._httpd = None

    def run(self, stop: threading.Event) -> None:
        self.start()
        try:
            stop.wait()
        finally:
            self.stop()
            log.info("admission webhook stopped")


def _handler(scheduler_name: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = 10  # a client that stalls mid-request is dropped

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == HEALTH_PATH:
                self._send(200, b"ok", "text/plain")
            else:
                self._send(404, b"not found", "text/plain")

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            if path not in (VALIDATE_PATH, MUTATE_PATH):
                self._send(404, b"not found", "text/plain")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                self._send(400 if length <= 0 else 413, b"an AdmissionReview body is required", "text/plain")
                return
            try:
                body = json.loads(self.rfile.read(length))
                request = body["request"]
                if not isinstance(request, dict):
                    raise TypeError("request is not an object")
            except (ValueError, KeyError, TypeError) as exc:
                self._send(400, f"not an AdmissionReview: {exc}".encode(), "text/plain")
                return
            reply = {"apiVersion": body.get("apiVersion", "admission.k8s.io/v1"), "kind": "AdmissionReview",
                     "response": (review if path == VALIDATE_PATH else mutation_review)(request, scheduler_name)}
            self._send(200, json.dumps(reply).encode(), "application/json")

        def _send(self, status: int, payload: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - requests are logged by review()
            pass

    return Handler
