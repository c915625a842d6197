"""A serving certificate for the webhook: a private CA and a server certificate it signs, made with ``openssl``.

    cert = serving_certificate(folder, ["kai-admission.kai-scheduler.svc", "127.0.0.1"])
    cert.cert_file, cert.key_file    # what the HTTPS server loads
    cert.ca_bundle()                 # base64 PEM of the CA, for a webhook's clientConfig.caBundle

Host names become DNS subject alternative names, IP addresses IP ones.
"""

from __future__ import annotations

import base64
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = {names}
"""


class CertificateError(RuntimeError):
    """The certificate could not be made (no openssl, openssl failed)."""


@dataclass(frozen=True)
class Certificate:
    cert_file: Path
    key_file: Path
    ca_file: Path

    def ca_bundle(self) -> str:
        """The CA certificate as base64 of its PEM: the ``caBundle`` of a webhook client config."""
        return base64.b64encode(self.ca_file.read_bytes()).decode()


def subject_alt_names(hosts: list[str]) -> str:
    names = []
    for host in hosts:
        try:
            names.append(f"IP:{ipaddress.ip_address(host)}")
        except ValueError:
            names.append(f"DNS:{host}")
    return ",".join(names)


def serving_certificate(folder: Path, hosts: list[str], days: int = 3650) -> Certificate:
    """A new CA and server certificate for ``hosts`` in ``folder`` (``ca.crt``, ``tls.crt``, ``tls.key``)."""
    if not hosts:
        raise CertificateError("a serving certificate needs at least one host name or IP address")
    openssl = shutil.which("openssl")
    if openssl is None:
        raise CertificateError("the 'openssl' command is needed to make a certificate; install OpenSSL or pass "
                               "certificate files")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "openssl.cnf").write_text(CONFIG.format(names=subject_alt_names(hosts)))

    def run(*args: str) -> None:
        proc = subprocess.run([openssl, *args], cwd=folder, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise CertificateError(f"openssl {args[0]} failed: {proc.stderr.strip()}")

    run("req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", "ca.key", "-out", "ca.crt",
        "-subj", "/CN=kai-admission-ca", "-days", str(days), "-config", "openssl.cnf", "-extensions", "ca")
    run("req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", "tls.key", "-out", "tls.csr",
        "-subj", f"/CN={hosts[0]}", "-config", "openssl.cnf")
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "tls.crt",
        "-days", str(days), "-extfile", "openssl.cnf", "-extensions", "server")
    for leftover in ("tls.csr", "ca.key", "ca.srl"):
        (folder / leftover).unlink(missing_ok=True)  # the CA signs this one certificate only
    (folder / "tls.key").chmod(0o600)
    return Certificate(folder / "tls.crt", folder / "tls.key", folder / "ca.crt")
