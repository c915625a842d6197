"""The admission webhook's own certificate, kept in a Secret, and its CA set into the webhook configurations.

KAI's operator makes a self-signed certificate for the webhook's Service, keeps it in a Secret and writes its
CA into the webhook configurations' ``caBundle``. Here the admission component does it itself, with
:class:`ManagedCertificate`:

* :meth:`~ManagedCertificate.load` reads the Secret ``secret`` of ``namespace`` (keys ``tls.crt``,
  ``tls.key``, ``ca.crt``, as cert-manager writes them) into ``folder``; where it is missing or incomplete, a
  certificate for ``hosts`` is made (:func:`kai.kube.certs.serving_certificate`) and stored. Replicas
  starting together agree: the first one to store wins, the others read what it stored.
* :meth:`~ManagedCertificate.inject` sets that CA as the ``caBundle`` of every webhook of the
  ValidatingWebhookConfiguration and MutatingWebhookConfiguration ``configuration`` (those that exist),
  writing only where it differs. The component calls it at start and every :data:`INJECT_PERIOD` seconds,
  so a ``helm upgrade`` or a hand edit that drops the ``caBundle`` is repaired.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from pathlib import Path

from kai.kube.certs import Certificate, serving_certificate
from kai.kube.client import ApiError, Kube, object_path
from kai.logs import fields

log = logging.getLogger(__name__)

#: Seconds between checks of the webhook configurations' ``caBundle``.
INJECT_PERIOD = 60.0
KEYS = {"tls.crt": "cert_file", "tls.key": "key_file", "ca.crt": "ca_file"}
CONFIGURATIONS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")


@dataclass
class ManagedCertificate:
    kube: Kube
    namespace: str
    secret: str
    hosts: list[str]
    configuration: str = ""
    certificate: Certificate | None = None

    @property
    def _secret_path(self) -> str:
        return object_path("", "v1", "secrets", self.namespace, self.secret)

    def load(self, folder: Path) -> Certificate:
        """The certificate of the Secret, made and stored first where the Secret lacks one; files in ``folder``."""
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            stored = self.kube.get(self._secret_path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            stored = None
        if stored is None or not KEYS.keys() <= (stored.get("data") or {}).keys():
            stored = self._store(serving_certificate(folder / "made", self.hosts), stored)
        paths = {}
        for key, field in KEYS.items():
            path = folder / key
            path.unlink(missing_ok=True)
            path.touch(mode=0o600)
            path.write_bytes(base64.b64decode(stored["data"][key]))
            paths[field] = path
        self.certificate = Certificate(**paths)
        return self.certificate

    def _store(self, made: Certificate, current: dict | None) -> dict:
        data = {key: base64.b64encode(getattr(made, field).read_bytes()).decode() for key, field in KEYS.items()}
        body: dict = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": self.secret, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/name": "kai-scheduler",
                                        "app.kubernetes.io/component": "admission"}},
                "data": data}
        try:
            if current is None:
                self.kube.post(object_path("", "v1", "secrets", self.namespace), body)
            else:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self.kube.request("PUT", self._secret_path, body=body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return self.kube.get(self._secret_path)  # another replica stored one first: use it
        log.info("admission certificate made", **fields(secret=f"{self.namespace}/{self.secret}",
                                                        hosts=",".join(self.hosts)))
        return body

    def inject(self) -> list[str]:
        """Sets the CA into the webhook configurations where it differs; the kinds written."""
        if not self.configuration or self.certificate is None:
            return []
        bundle = self.certificate.ca_bundle()
        written = []
        for plural in CONFIGURATIONS:
            path = object_path("admissionregistration.k8s.io", "v1", plural, name=self.configuration)
            try:
                configuration = self.kube.get(path)
            except ApiError as exc:
                if exc.status == 404:
                    continue
                raise
            hooks = configuration.get("webhooks") or []
            if all((hook.get("clientConfig") or {}).get("caBundle") == bundle for hook in hooks):
                continue
            for hook in hooks:
                hook.setdefault("clientConfig", {})["caBundle"] = bundle
            self.kube.request("PUT", path, body=configuration)  # the resourceVersion read guards the write
            written.append(plural)
        if written:
            log.info("admission CA set into the webhook configurations",
                     **fields(configuration=self.configuration, kinds=",".join(written)))
        return written
