"""The admission webhook's certificate kept in a Secret, and its CA set into the webhook configurations."""

from __future__ import annotations

import base64
import shutil

import pytest

from kai.admission.certificates import ManagedCertificate
from support.kube import FakeApi

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")

SECRET = "/api/v1/namespaces/kai/secrets/kai-admission-tls"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kai-admission"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kai-admission"


def managed(kube) -> ManagedCertificate:
    return ManagedCertificate(kube, "kai", "kai-admission-tls", ["kai-admission.kai.svc"], "kai-admission")


def test_a_missing_secret_is_made_and_an_existing_one_is_served(tmp_path):
    kube = FakeApi()
    made = managed(kube).load(tmp_path / "a")
    stored = kube.objects[SECRET]
    assert stored["type"] == "kubernetes.io/tls"
    assert base64.b64decode(stored["data"]["tls.crt"]) == made.cert_file.read_bytes()
    assert made.key_file.stat().st_mode & 0o777 == 0o600
    again = managed(kube).load(tmp_path / "b")
    assert again.cert_file.read_bytes() == made.cert_file.read_bytes() and kube.paths("POST") == [
        "/api/v1/namespaces/kai/secrets"]


def test_a_replica_losing_the_race_serves_the_stored_certificate(tmp_path):
    kube = FakeApi()
    first = managed(kube).load(tmp_path / "a")
    kube.fail(404, "NotFound", "GET", SECRET)  # stored by another replica between our read and our write
    second = managed(kube).load(tmp_path / "b")
    assert second.ca_file.read_bytes() == first.ca_file.read_bytes()


def test_the_ca_is_set_into_every_webhook_only_where_it_differs(tmp_path):
    kube = FakeApi()
    kube.add(VALIDATING, {"metadata": {"name": "kai-admission"},
                          "webhooks": [{"name": "a", "clientConfig": {"service": {"name": "s"}}},
                                       {"name": "b", "clientConfig": {"caBundle": "old"}}]})
    certificate = managed(kube)
    assert certificate.inject() == []  # nothing loaded yet
    certificate.load(tmp_path)
    bundle = certificate.certificate.ca_bundle()  # type: ignore[union-attr]
    assert certificate.inject() == ["validatingwebhookconfigurations"]  # the mutating one does not exist
    assert [h["clientConfig"]["caBundle"] for h in kube.objects[VALIDATING]["webhooks"]] == [bundle, bundle]
    assert kube.objects[VALIDATING]["webhooks"][0]["clientConfig"]["service"] == {"name": "s"}
    assert certificate.inject() == []
