"""The admission webhook's GPU-sharing decisions, its HTTPS server with a certificate made at start, its
paths, and the ``kai-scheduler run`` flags that configure it.

Registration with the real API server is exercised by tests/e2e/test_admission.py.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import time
import warnings

import pytest

from kai.admission.webhook import (
    MUTATE_PATH,
    PODGROUP_PATH,
    QUEUE_PATH,
    TOPOLOGY_PATH,
    VALIDATE_PATH,
    AdmissionServer,
    review,
)
from kai.api.names import QUEUES
from kai.framework import DEFAULT_CONFIG
from kai.kube.client import object_path
from kai.metrics import Registry
from kai.run import Context, _parser
from support.kube import FakeApi
from support.waiting import wait_until


def pod(annotations=None, gpus=None, scheduler="kai-scheduler", init_gpus=None):
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}}
    spec = {"schedulerName": scheduler, "containers": [container]}
    if init_gpus:
        spec["initContainers"] = [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": init_gpus}}}]
    return {"metadata": {"name": "p", "annotations": annotations or {}}, "spec": spec}


def request(obj, operation="CREATE", old=None):
    return {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": operation,
            "namespace": "team-a", "name": "p", "object": obj, "oldObject": old}


@pytest.mark.parametrize(
    ("annotations", "gpus", "field"),
    [
        ({"gpu-fraction": "1.01"}, None, "gpu-fraction"),
        ({"gpu-fraction": "-0.5"}, None, "gpu-fraction"),
        ({"gpu-fraction": "abc"}, None, "gpu-fraction"),
        ({"gpu-fraction": "0.5", "gpu-memory": "1024"}, None, "gpu-memory"),
        ({"gpu-fraction": "0.5"}, "1", "nvidia.com/gpu"),
        ({"gpu-memory": "1024"}, "2", "nvidia.com/gpu"),
        ({"gpu-fraction-num-devices": "2"}, None, "gpu-fraction-num-devices"),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}, None, "gpu-fraction-num-devices"),
        ({"gpu-memory": "lots"}, None, "gpu-memory"),
    ],
)
def test_bad_requests_are_denied_with_the_field_named(annotations, gpus, field):
    response = review(request(pod(annotations, gpus)))
    assert response["uid"] == "u-1" and response["allowed"] is False
    assert response["status"]["code"] == 403
    assert field in response["status"]["message"] and "team-a/p" in response["status"]["message"]


@pytest.mark.parametrize("annotations", [{"gpu-fraction": "0.5"}, {"gpu-fraction": "1"}, {"gpu-memory": "2048"},
                                         {"gpu-fraction": "0.25", "gpu-fraction-num-devices": "4"}, {}])
def test_good_requests_are_allowed(annotations):
    assert review(request(pod(annotations)))["allowed"] is True


def test_whole_gpus_alone_and_other_schedulers_pods_are_allowed():
    assert review(request(pod(gpus="2")))["allowed"] is True
    assert review(request(pod({"gpu-fraction": "7"}, scheduler="default-scheduler")))["allowed"] is True


def test_an_update_is_denied_only_when_it_makes_the_pod_invalid():
    bad, good = pod({"gpu-fraction": "3"}), pod({"gpu-fraction": "0.5"})
    labelled = pod({"gpu-fraction": "3"})
    labelled["metadata"]["labels"] = {"kai.scheduler/subgroup-name": "workers"}
    assert review(request(labelled, "UPDATE", old=bad))["allowed"] is True
    assert review(request(bad, "UPDATE", old=good))["allowed"] is False
    assert review(request(bad, "DELETE", old=bad))["allowed"] is True


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = AdmissionServer("127.0.0.1:0", hosts=["127.0.0.1", "kai-admission.kai-scheduler.svc"],
                             cert_dir=str(tmp_path_factory.mktemp("certs"))).start()
    yield server
    server.stop()


def post(server, body: bytes, path=VALIDATE_PATH):
    context = ssl.create_default_context(cafile=str(server.certificate.ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_the_server_answers_admission_reviews_over_verified_tls(server):
    review_body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "request": request(pod({"gpu-fraction": "2"}))}
    status, body = post(server, json.dumps(review_body).encode())
    assert status == 200
    reply = json.loads(body)
    assert reply["kind"] == "AdmissionReview" and reply["apiVersion"] == "admission.k8s.io/v1"
    assert reply["response"]["allowed"] is False and "gpu-fraction" in reply["response"]["status"]["message"]


@pytest.mark.parametrize(("path", "obj", "message"), [
    (QUEUE_PATH, {"kind": {"kind": "Queue"}, "name": "q", "object": {"metadata": {"name": "q"}, "spec": {}}},
     "resources must be specified"),
    (PODGROUP_PATH, {"kind": {"kind": "PodGroup"}, "namespace": "ns", "name": "pg",
                     "object": {"spec": {"minMember": 1, "minSubGroup": 1}}}, "minMember and minSubGroup"),
    (TOPOLOGY_PATH, {"kind": {"kind": "Topology"}, "name": "t",
                     "object": {"spec": {"levels": [{"nodeLabel": "a", "alias": "a"}]}}}, "invalid topology aliases"),
])
def test_each_kai_path_answers_its_resource_s_reviews(server, path, obj, message):
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-2", "operation": "CREATE", **obj}}
    status, reply = post(server, json.dumps(body).encode(), path=path)
    assert status == 200
    response = json.loads(reply)["response"]
    assert response["uid"] == "u-2" and response["allowed"] is False and message in response["status"]["message"]


def test_a_review_that_fails_is_an_error_answer_and_the_server_goes_on(server, monkeypatch, caplog):
    def broken(request):
        raise KeyError("surprise")

    monkeypatch.setitem(server.routes, TOPOLOGY_PATH, broken)
    body = json.dumps({"request": {"uid": "u-3", "kind": {"kind": "Topology"}}}).encode()
    with caplog.at_level("ERROR", logger="kai.admission.webhook"):
        assert post(server, body, path=TOPOLOGY_PATH)[0] == 500
    assert "admission review failed" in caplog.text
    monkeypatch.undo()
    assert post(server, body, path=TOPOLOGY_PATH)[0] == 200


def test_the_server_refuses_what_is_not_an_admission_review(server):
    assert post(server, b"{not json")[0] == 400
    assert post(server, b'{"request": 3}')[0] == 400
    assert post(server, b"{}", path="/elsewhere")[0] == 404


def test_a_certificate_is_required_one_way_or_another():
    with pytest.raises(ValueError, match="certificate files or host names"):
        AdmissionServer(":0")
    with pytest.raises(ValueError, match="both"):
        AdmissionServer(":0", cert_file="tls.crt")


def _handshake(port: int, version: ssl.TLSVersion) -> str:
    """The TLS version agreed by a client offering only ``version`` (its own policy relaxed to allow it)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSv1_1 is deprecated: that is the point
        context.minimum_version = context.maximum_version = version
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw) as tls:
            return tls.version()


def test_the_server_speaks_tls_1_2_and_1_3_and_refuses_older_versions(server):
    assert _handshake(server.port, ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    assert _handshake(server.port, ssl.TLSVersion.TLSv1_3) == "TLSv1.3"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1]
    for version in old:
        with pytest.raises(ssl.SSLError, match="PROTOCOL_VERSION"):  # the server's protocol_version alert
            _handshake(server.port, version)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def test_stop_answers_the_review_in_progress_and_accepts_nothing_new(tmp_path):
    server = AdmissionServer("127.0.0.1:0", hosts=["127.0.0.1"], cert_dir=str(tmp_path)).start()
    port = server.port
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": request(pod({"gpu-fraction": "0.5"}))}).encode()
    context = ssl.create_default_context(cafile=str(server.certificate.ca_file))
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    tls = context.wrap_socket(conn, server_hostname="127.0.0.1")
    tls.sendall(f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
    time.sleep(0.2)  # the server has the request and waits for the rest of its body
    stopping = threading.Thread(target=server.stop, kwargs={"timeout": 10})
    stopping.start()
    # the accept loop ends within its poll interval
    wait_until(lambda: not _accepts(port), 5, "the accept loop to end", interval=0.05)
    assert stopping.is_alive()  # waiting for the review in progress
    tls.sendall(body[10:])
    reply = b""
    while chunk := tls.recv(65536):  # HTTP/1.0: the server closes the connection after its answer
        reply += chunk
    tls.close()
    stopping.join(10)
    assert not stopping.is_alive()
    assert reply.startswith(b"HTTP/1.0 200") and b'"allowed": true' in reply


def test_stop_does_not_wait_past_its_timeout_for_a_stalled_client(tmp_path):
    server = AdmissionServer("127.0.0.1:0", hosts=["127.0.0.1"], cert_dir=str(tmp_path)).start()
    context = ssl.create_default_context(cafile=str(server.certificate.ca_file))
    with context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=10),
                             server_hostname="127.0.0.1") as tls:
        tls.sendall(f"POST {VALIDATE_PATH} HTTP/1.1\r\nContent-Length: 100\r\n\r\n{{".encode())  # and no more
        time.sleep(0.2)
        begin = time.monotonic()
        server.stop(timeout=0.3)
        assert time.monotonic() - begin < 5  # not the 10 s the server gives a stalled request



# -- kai-scheduler run's admission flags ------------------------------------------------------------------------


def queues_only(*queues) -> FakeApi:
    """The API through which the Queue webhook's quota validation reads a parent queue."""
    kube = FakeApi()
    for queue in queues:
        kube.add(object_path(*QUEUES, name=queue["metadata"]["name"]), queue)
    return kube


class LocalContext(Context):
    def client(self):
        return self.kube


def admission(*argv, kube=None):
    from kai.run import COMPONENTS

    return COMPONENTS["admission"](LocalContext(_parser().parse_args(["--webhook-host", "localhost", *argv]),
                                                DEFAULT_CONFIG, kube or queues_only(), Registry()))


FRACTIONAL = request(pod({"gpu-fraction": "0.5"}))


def runtime_class(server):
    ops = json.loads(base64.b64decode(server.routes[MUTATE_PATH](FRACTIONAL)["patch"]))
    return next((op["value"] for op in ops if op["path"] == "/spec/runtimeClassName"), None)


def test_run_sets_kai_s_runtime_class_on_fractional_pods_unless_told_otherwise():
    assert runtime_class(admission()) == "nvidia"
    assert runtime_class(admission("--gpu-fraction-runtime-class-name", "kata")) == "kata"
    assert runtime_class(admission("--gpu-fraction-runtime-class-name=")) is None
    assert runtime_class(admission("--fake-gpu-nodes")) is None  # kwok: no runtime to name
    assert runtime_class(admission("--fake-gpu-nodes", "--gpu-fraction-runtime-class-name", "kata")) == "kata"
    assert runtime_class(admission("--gpu-pod-runtime-class-name", "legacy")) == "legacy"
    assert runtime_class(admission("--gpu-pod-runtime-class-name", "legacy",
                                   "--gpu-fraction-runtime-class-name", "new")) == "new"


def test_run_switches_gpu_sharing_and_device_access_as_kai_s_flags_do():
    assert admission().routes[VALIDATE_PATH](FRACTIONAL)["allowed"] is True
    refused = admission("--gpu-sharing-enabled=false").routes[VALIDATE_PATH](FRACTIONAL)
    assert "while GPU sharing is disabled" in refused["status"]["message"]
    overriding = pod()
    overriding["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert admission().routes[VALIDATE_PATH](request(overriding))["allowed"] is True
    for flag in ("--block-nvidia-visible-devices", "--block-nvidia-visible-devices=true"):
        assert admission(flag).routes[VALIDATE_PATH](request(overriding))["allowed"] is False
    with pytest.raises(SystemExit):
        _parser().parse_args(["--gpu-sharing-enabled=maybe"])


def test_run_turns_quota_validation_on_with_its_flag():
    parent = {"metadata": {"name": "parent"}, "spec": {"resources": {"gpu": {"quota": 1}}}}
    child = {"uid": "u", "kind": {"kind": "Queue"}, "operation": "CREATE",
             "object": {"metadata": {"name": "child"},
                        "spec": {"parentQueue": "parent", "resources": {"gpu": {"quota": 2}}}}}
    assert "warnings" not in admission().routes[QUEUE_PATH](child)
    warned = admission("--enable-quota-validation", kube=queues_only(parent)).routes[QUEUE_PATH](child)
    assert warned["allowed"] and warned["warnings"] == [
        "child queue GPU quota (2.00) exceeds parent queue parent GPU quota (1.00)"]
