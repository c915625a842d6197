"""The local control plane's PKI: a CA, the serving certificates of the API server and the controller
manager, the client certificates of the admin and the controller manager, and the service-account
signing keys, made with ``openssl``; every file mode 0600."""

from __future__ import annotations

from pathlib import Path

from kai.dev.gobuild import ControlPlaneError, MissingToolError
from kai.kube.certs import CertificateError, OpenSSL, OpenSSLMissing

#: Names the serving certificates (apiserver, controller manager) are valid for.
APISERVER_HOSTS = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.0.0.1"]


def make_pki(pki: Path) -> None:
    """Creates a CA, the serving certificates of the apiserver and the controller manager, the client
    certificates of the admin (group ``system:masters``) and the controller manager (user
    ``system:kube-controller-manager``) and the service-account signing key pair, with ``openssl``."""
    try:
        openssl = OpenSSL(pki, APISERVER_HOSTS)
        openssl.ca("/CN=kai-dev-ca", 3650)
        openssl.sign("apiserver", "/CN=kube-apiserver", "server", 3650)
        openssl.sign("admin", "/O=system:masters/CN=kai-dev-admin", "client", 3650)
        openssl.sign("controller-manager-serving", "/CN=kube-controller-manager", "server", 3650)
        openssl.sign("controller-manager", "/CN=system:kube-controller-manager", "client", 3650)
        openssl.run("genrsa", "-out", "sa.key", "2048")
        openssl.run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        openssl.restrict("sa.key", "sa.pub")
    except OpenSSLMissing as exc:
        raise MissingToolError(str(exc)) from None
    except CertificateError as exc:
        raise ControlPlaneError(str(exc)) from None
