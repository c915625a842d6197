"""A serving certificate for the webhook: a private CA and a server certificate it signs, made with ``openssl``.

    cert = serving_certificate(folder, ["kai-admission.kai-scheduler.svc", "127.0.0.1"])
    cert.cert_file, cert.key_file    # what the HTTPS server loads
    cert.ca_bundle()                 # base64 PEM of the CA, for a webhook's clientConfig.caBundle

Host names become DNS subject alternative names, IP addresses IP ones. Every file is written with
mode 0600, in a folder made with mode 0700 (OpenSSL creates private keys 0600 itself).
"""

from __future__ import annotations

import base64
import ipaddress
import os
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
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
"""


class CertificateError(RuntimeError):
    """The certificate could not be made (no openssl, openssl failed)."""


class OpenSSLMissing(CertificateError):
    """The ``openssl`` command is not installed."""


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


class OpenSSL:
    """The ``openssl`` command run in ``folder``, with a configuration whose server certificates are valid
    for ``hosts``; CA and signed certificates are written there as ``NAME.crt`` / ``NAME.key``."""

    def __init__(self, folder: Path, hosts: list[str]) -> None:
        command = shutil.which("openssl")
        if command is None:
            raise OpenSSLMissing("the 'openssl' command is needed to make certificates; install OpenSSL")
        self.command = command
        self.folder = Path(folder)
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        config = self.folder / "openssl.cnf"
        config.unlink(missing_ok=True)
        with os.fdopen(os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(CONFIG.format(names=subject_alt_names(hosts)))

    def restrict(self, *names: str) -> None:
        """Mode 0600 for the files ``names`` of the folder (those that exist)."""
        for name in names:
            path = self.folder / name
            if path.exists():
                path.chmod(0o600)

    def run(self, *args: str) -> None:
        proc = subprocess.run([self.command, *args], cwd=self.folder, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise CertificateError(f"openssl {args[0]} failed: {proc.stderr.strip()}")

    def ca(self, subject: str, days: int) -> None:
        """A self-signed CA (``ca.crt``, ``ca.key``)."""
        self.run("req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", "ca.key", "-out", "ca.crt",
                 "-subj", subject, "-days", str(days), "-config", "openssl.cnf", "-extensions", "ca")
        self.restrict("ca.key", "ca.crt")

    def sign(self, name: str, subject: str, extension: str, days: int) -> None:
        """A key and a certificate signed by the CA, with the ``server`` or ``client`` extensions."""
        self.run("req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subject, "-config", "openssl.cnf")
        self.run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", str(days), "-extfile", "openssl.cnf", "-extensions", extension)
        (self.folder / f"{name}.csr").unlink()
        self.restrict(f"{name}.key", f"{name}.crt", "ca.srl")


def serving_certificate(folder: Path, hosts: list[str], days: int = 3650) -> Certificate:
    """A new CA and server certificate for ``hosts`` in ``folder`` (``ca.crt``, ``tls.crt``, ``tls.key``)."""
    if not hosts:
        raise CertificateError("a serving certificate needs at least one host name or IP address")
    openssl = OpenSSL(folder, hosts)
    openssl.ca("/CN=kai-admission-ca", days)
    openssl.sign("tls", f"/CN={hosts[0]}", "server", days)
    for leftover in ("ca.key", "ca.srl"):
        (openssl.folder / leftover).unlink(missing_ok=True)  # the CA signs this one certificate only
    return Certificate(openssl.folder / "tls.crt", openssl.folder / "tls.key", openssl.folder / "ca.crt")
