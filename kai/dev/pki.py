"""The local control plane's PKI: a CA, the API server's serving certificate, an admin client
certificate and the service-account signing keys, made with ``openssl``; every file mode 0600."""

from __future__ import annotations

from pathlib import Path

from kai.dev.gobuild import ControlPlaneError, MissingToolError
from kai.kube.certs import CertificateError, OpenSSL, OpenSSLMissing

#: Names the apiserver's serving certificate is valid for.
APISERVER_HOSTS = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.0.0.1"]


def make_pki(pki: Path) -> None:
    """Creates a CA, the apiserver's serving certificate, an admin client certificate
    (group ``system:masters``) and the service-account signing key pair, with ``openssl``."""
    try:
        openssl = OpenSSL(pki, APISERVER_HOSTS)
        openssl.ca("/CN=kai-dev-ca", 3650)
        openssl.sign("apiserver", "/CN=kube-apiserver", "server", 3650)
        openssl.sign("admin", "/O=system:masters/CN=kai-dev-admin", "client", 3650)
        openssl.run("genrsa", "-out", "sa.key", "2048")
        openssl.run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        openssl.restrict("sa.key", "sa.pub")
    except OpenSSLMissing as exc:
        raise MissingToolError(str(exc)) from None
    except CertificateError as exc:
        raise ControlPlaneError(str(exc)) from None
