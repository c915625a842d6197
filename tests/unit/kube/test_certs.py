"""Certificates and keys made with openssl: the webhook's serving certificate and the local control
plane's PKI are readable by their owner only."""

from __future__ import annotations

import ssl
import stat

from kai.dev.pki import make_pki
from kai.kube.certs import serving_certificate


def modes(folder) -> dict[str, int]:
    return {path.name: stat.S_IMODE(path.stat().st_mode) for path in folder.iterdir()}


def test_the_serving_certificate_and_its_key_are_mode_0600_in_a_private_folder(tmp_path):
    folder = tmp_path / "certs"
    cert = serving_certificate(folder, ["kai-admission.kai-scheduler.svc", "127.0.0.1"])
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert modes(folder) == {"tls.crt": 0o600, "tls.key": 0o600, "ca.crt": 0o600, "openssl.cnf": 0o600}
    ssl.create_default_context(cafile=str(cert.ca_file)).load_cert_chain(cert.cert_file, cert.key_file)  # usable


def test_a_certificate_made_again_in_the_same_folder_keeps_the_modes(tmp_path):
    serving_certificate(tmp_path, ["127.0.0.1"])
    serving_certificate(tmp_path, ["localhost"])
    assert set(modes(tmp_path).values()) == {0o600}


def test_the_local_control_plane_s_keys_and_certificates_are_mode_0600(tmp_path):
    pki = tmp_path / "pki"
    make_pki(pki)
    assert stat.S_IMODE(pki.stat().st_mode) == 0o700
    found = modes(pki)
    made = {"ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key", "sa.key", "sa.pub"}
    assert made <= set(found)
    assert set(found.values()) == {0o600}, found
