"""The ``admission`` component: KAI's admission webhooks on one HTTPS server.

* ``POST /validate--v1-pod`` and ``POST /mutate--v1-pod``: pods (:mod:`kai.admission.pods`);
* ``POST /validate-scheduling-run-ai-v2-queue``: Queues (:mod:`kai.admission.queues`);
* ``POST /validate-scheduling-run-ai-v2alpha2-podgroup``: PodGroups (:mod:`kai.admission.podgroups`);
* ``POST /validate-kai-scheduler-v1alpha1-topology``: Topologies (:mod:`kai.admission.topologies`);
* ``GET /healthz``: probes.

The paths are KAI's. Each answers an ``AdmissionReview`` ``admission.k8s.io/v1``. Only the Queue webhook
with quota validation calls the API (it reads the parent and sibling queues).

Given ``settings`` (a :class:`kai.kube.kaiconfig.KaiObjects` of :class:`~kai.admission.pods.PodPolicy`, built
by :func:`kai.admission.settings.policy_builder`), the pod webhooks answer each review with the policy in force
then: a change of ``Config kai-config`` applies to the next review.

The server speaks HTTPS. Its certificate comes from files, or from a Secret where the component keeps the
one it made (``managed``, :mod:`kai.admission.certificates`, which also sets its CA into the webhook
configurations), or is made at start for the given host names by a fresh private CA, whose PEM
(:attr:`AdmissionServer.ca_bundle`) goes into the webhook configurations' ``caBundle``. It accepts TLS 1.2
and 1.3 only.

On stop it accepts no new connection and answers the reviews in progress, for at most
:data:`STOP_TIMEOUT` seconds.
"""

from __future__ import annotations

import json
import logging
import ssl
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from kai.admission import podgroups, queues, topologies
from kai.admission.certificates import INJECT_PERIOD, ManagedCertificate
from kai.admission.pods import PodPolicy, mutation_review, review
from kai.admission.queues import QueueLookupError, QueueReader
from kai.api.names import CONFIGS, QUEUES, SCHEDULER_NAME
from kai.kube.access import Access
from kai.kube.certs import Certificate, serving_certificate
from kai.kube.client import ApiError, object_path
from kai.kube.kaiconfig import CONFIG_STATUS_ACCESS, KaiObjects
from kai.kube.server import HTTPServer, parse_address
from kai.logs import fields

log = logging.getLogger(__name__)

VALIDATE_PATH = "/validate--v1-pod"
MUTATE_PATH = "/mutate--v1-pod"
QUEUE_PATH = "/validate-scheduling-run-ai-v2-queue"
PODGROUP_PATH = "/validate-scheduling-run-ai-v2alpha2-podgroup"
TOPOLOGY_PATH = "/validate-kai-scheduler-v1alpha1-topology"
HEALTH_PATH = "/healthz"
#: KAI's admission server listens on ``--webhook-addr`` ``:9443``.
DEFAULT_ADDRESS = ":9443"
#: An AdmissionReview of one pod is far below this; larger bodies are refused unread.
MAX_BODY = 8 * 1024 * 1024
#: How long a stopping webhook waits for the reviews in progress, seconds.
STOP_TIMEOUT = 2.0
#: The Queue webhook with quota validation reads queues; the settings come from KAI's Config, which it may report on.
API_ACCESS = (Access(QUEUES[0], QUEUES[2], ("get",)), Access(CONFIGS[0], CONFIGS[2], ("get", "list", "watch")),
              *CONFIG_STATUS_ACCESS)

__all__ = ["AdmissionServer", "mutation_review", "queue_reader", "review"]


def queue_reader(kube) -> QueueReader:
    """Reads a Queue by name through ``kube``, for the Queue webhook's quota validation."""

    def read(name: str) -> dict:
        try:
            return kube.get(object_path(*QUEUES, name=name))
        except ApiError as exc:
            if exc.status == 404:
                raise QueueLookupError(f'{QUEUES[2]}.{QUEUES[0]} "{name}" not found') from exc
            raise QueueLookupError(str(exc)) from exc

    return read


class AdmissionServer:
    """The ``admission`` component; ``start()`` binds and serves, ``run(stop)`` serves until ``stop`` is set.

    Give ``cert_file`` and ``key_file``, or ``hosts`` (DNS names, IP addresses) for a certificate made
    at start in ``cert_dir`` (default: a temporary folder), or ``managed`` (a certificate kept in a Secret,
    its files in ``cert_dir``). ``gpu_sharing``, ``block_visible_devices`` and
    ``runtime_class`` are the pod webhooks' options (:class:`~kai.admission.pods.PodPolicy`), which ``settings``
    replaces live (see the module docstring); ``read_queue`` (:func:`queue_reader`) turns the Queue webhook's
    quota validation on.
    """

    name = "admission"

    def __init__(self, address: str = DEFAULT_ADDRESS, *, scheduler_name: str = SCHEDULER_NAME,
                 cert_file: str | None = None, key_file: str | None = None, hosts: list[str] | None = None,
                 cert_dir: str | None = None, gpu_sharing: bool = True, block_visible_devices: bool = False,
                 runtime_class: str = "", read_queue: QueueReader | None = None, hami_core: bool = False,
                 settings: KaiObjects[PodPolicy] | None = None, managed: ManagedCertificate | None = None,
                 inject_period: float = INJECT_PERIOD) -> None:
        if bool(cert_file) != bool(key_file):
            raise ValueError("give both a certificate file and its key file, or neither")
        if cert_file and managed is not None:
            raise ValueError("give certificate files or a certificate Secret, not both")
        if not cert_file and not hosts and managed is None:
            raise ValueError("the admission webhook needs certificate files or host names for its own certificate")
        self.address = parse_address(address)
        self.base_policy = PodPolicy(scheduler_name, gpu_sharing, block_visible_devices, runtime_class, hami_core)
        self.settings = settings
        self._settings_version = 0
        self.routes: dict[str, Callable[[dict], dict]] = {
            VALIDATE_PATH: lambda request: review(request, self.policy()),
            MUTATE_PATH: lambda request: mutation_review(request, self.policy()),
            QUEUE_PATH: lambda request: queues.review(request, read_queue),
            PODGROUP_PATH: podgroups.review,
            TOPOLOGY_PATH: topologies.review,
        }
        self.cert_file, self.key_file = cert_file, key_file
        self.hosts = list(hosts or ())
        self.cert_dir = cert_dir
        self.certificate: Certificate | None = None
        self.managed, self.inject_period = managed, inject_period
        self._httpd: HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def policy(self) -> PodPolicy:
        """The pod webhooks' options in force: the Config's over the flags (the flags without ``settings``)."""
        if self.settings is None:
            return self.base_policy
        version, policy = self.settings.version, self.settings.value
        if version != self._settings_version:
            self._settings_version = version
            log.info("admission configuration applied", **fields(
                gpu_sharing=policy.gpu_sharing, block_nvidia_visible_devices=policy.block_visible_devices,
                runtime_class=policy.runtime_class, objects=self.settings.describe()))
        return policy

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
        if self.settings is not None:
            self.settings.start()
        cert_file, key_file = self.cert_file, self.key_file
        if not cert_file:
            folder = Path(self.cert_dir or tempfile.mkdtemp(prefix="kai-admission-"))
            if self.managed is not None:
                self.certificate = self.managed.load(folder)
            else:
                self.certificate = serving_certificate(folder, self.hosts)
            cert_file, key_file = str(self.certificate.cert_file), str(self.certificate.key_file)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert_file, key_file)
        httpd = HTTPServer(self.address, _handler(self.routes))
        # the handshake happens on the request's thread, under its timeout, not in the accept loop
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="admission", daemon=True)
        self._thread.start()
        log.info("admission webhook serving", **fields(address=f"{self.address[0]}:{self.port}",
                                                       paths=",".join(self.routes), ca_bundle=self.ca_bundle))
        if self.managed is not None:
            self.managed.inject()
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Accepts nothing new and answers the reviews in progress, waiting at most ``timeout`` seconds."""
        if self._httpd is not None:
            if not self._httpd.drain(timeout):
                log.warning("admission webhook stopped with reviews unanswered", **fields(timeout_seconds=timeout))
            self._httpd = None
            if self.settings is not None:
                self.settings.stop()

    def run(self, stop: threading.Event) -> None:
        self.start()
        try:
            managed = self.managed
            while not stop.wait(self.inject_period if managed is not None else None):
                try:
                    if managed is not None:
                        managed.inject()
                except ApiError as exc:
                    log.warning("could not set the admission CA into the webhook configurations",
                                **fields(error=str(exc)))
        finally:
            self.stop()
            log.info("admission webhook stopped")


def _handler(routes: dict[str, Callable[[dict], dict]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = 10  # a client that stalls mid-request is dropped

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == HEALTH_PATH:
                self._send(200, b"ok", "text/plain")
            else:
                self._send(404, b"not found", "text/plain")

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            answer = routes.get(path)
            if answer is None:
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
            try:
                response = answer(request)
            except Exception:  # noqa: BLE001 - a fault in one review is an error answer, not a dead server
                log.exception("admission review failed", **fields(path=path, uid=request.get("uid")))
                self._send(500, b"the review failed; see the webhook's log", "text/plain")
                return
            reply = {"apiVersion": body.get("apiVersion", "admission.k8s.io/v1"), "kind": "AdmissionReview",
                     "response": response}
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
