"""Keep-alive connections of the API client against a local HTTP/1.1 server that closes connections
the ways a real one does: after a response while idle, or as a request on a kept connection arrives.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from kubernetes import client

from kai.kube.client import ApiError, Kube, query_string
from kai.kube.connections import Connections


class Server:
    """Answers ``{"n": <request number>}`` to each request. ``answers`` is how many requests a
    connection answers; the next one on it is read and the connection closed without a reply
    (0: close right after the last answer, as an idle timeout does)."""

    def __init__(self, answers: int | None = None, close_idle: bool = False, framing: str = "length") -> None:
        self.answers = answers
        self.close_idle = close_idle
        #: How each response is framed: "length" (Content-Length), "chunked" (in 3-byte chunks), "close"
        #: (Content-Length and ``Connection: close``, then closed) or "garbage" (not HTTP).
        self.framing = framing
        self.received: list[tuple[str, str]] = []
        self.connections = 0
        self.tokens: list[str] = []
        self.closed_idle = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        answered = 0
        with conn, reader:
            while True:
                line = reader.readline()
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                length = 0
                while (header := reader.readline()) not in (b"\r\n", b""):
                    name, _, value = header.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                    if name.lower() == "authorization":
                        self.tokens.append(value.strip())
                reader.read(length)
                self.received.append((method, target))
                if self.answers is not None and answered >= self.answers:
                    return  # read, not answered: the connection closes under the request
                body = b'{"n": %d}' % len(self.received)
                conn.sendall(self._response(body))
                answered += 1
                if self.framing == "close":
                    time.sleep(0.5)  # said it closes, and does so only later: a request sent on it gets no answer
                    return
                if self.close_idle:
                    conn.shutdown(socket.SHUT_RDWR)
                    self.closed_idle.set()
                    return

    def _response(self, body: bytes) -> bytes:
        if self.framing == "garbage":
            return b"SPDY/9 what\r\n\r\n"
        if self.framing == "chunked":
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 3]), body[i:i + 3]) for i in range(0, len(body), 3))
            return b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n%s0\r\n\r\n" % chunks
        close = b"Connection: close\r\n" if self.framing == "close" else b""
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s" % (
            close, len(body), body)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def server_factory():
    servers: list[Server] = []

    def make(**kw) -> Server:
        servers.append(Server(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def kube(server: Server) -> Kube:
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.port}"
    return Kube(client.ApiClient(configuration), timeout=5.0)


def test_requests_share_one_kept_connection(server_factory):
    server = server_factory()
    k = kube(server)
    assert [k.get("/api/v1/pods", {"limit": 2})["n"] for _ in range(3)] == [1, 2, 3]
    assert server.connections == 1
    assert server.received[0] == ("GET", "/api/v1/pods?limit=2")


def test_a_chunked_response_is_read_whole_and_its_connection_kept(server_factory):
    server = server_factory(framing="chunked")
    k = kube(server)
    assert [k.post("/api/v1/namespaces/ns/events", {})["n"] for _ in range(2)] == [1, 2]
    assert server.connections == 1


def test_a_connection_the_server_says_it_closes_is_not_kept(server_factory):
    server = server_factory(framing="close")
    k = kube(server)
    assert [k.post("/api/v1/namespaces/ns/events", {})["n"] for _ in range(2)] == [1, 2]
    assert server.connections == 2


def test_a_response_that_is_not_http_fails_the_request(server_factory):
    with pytest.raises(ApiError) as failed:
        kube(server_factory(framing="garbage")).get("/api/v1/pods")
    assert failed.value.status == 0 and "malformed response" in str(failed.value)


def test_a_read_on_a_connection_closed_under_it_is_sent_again_on_a_new_one(server_factory):
    server = server_factory(answers=1)
    k = kube(server)
    assert k.get("/api/v1/pods")["n"] == 1
    assert k.get("/api/v1/nodes")["n"] == 3  # the second request was read, then the connection closed
    assert server.received == [("GET", "/api/v1/pods"), ("GET", "/api/v1/nodes"), ("GET", "/api/v1/nodes")]
    assert server.connections == 2


@pytest.mark.parametrize("method", ["POST", "PATCH", "PUT", "DELETE"])
def test_a_write_on_a_connection_closed_under_it_is_not_sent_again(server_factory, method):
    server = server_factory(answers=1)
    k = kube(server)
    k.get("/api/v1/pods")
    with pytest.raises(ApiError) as failed:
        k.request(method, "/api/v1/namespaces/ns/events", body={"reason": "Scheduled"})
    assert failed.value.status == 0
    assert server.received == [("GET", "/api/v1/pods"), (method, "/api/v1/namespaces/ns/events")]
    assert k.post("/api/v1/namespaces/ns/events", {})["n"] == 3  # the next request opens a new connection


def test_a_failure_on_a_new_connection_is_not_retried(server_factory):
    server = server_factory(answers=0)
    with pytest.raises(ApiError):
        kube(server).get("/api/v1/pods")
    assert server.received == [("GET", "/api/v1/pods")]


def test_an_idle_connection_the_server_closed_is_replaced_before_a_write(server_factory):
    server = server_factory(close_idle=True)
    k = kube(server)
    k.get("/api/v1/pods")
    assert server.closed_idle.wait(5)
    time.sleep(0.05)  # the FIN reaches the client's socket
    assert k.post("/api/v1/namespaces/ns/events", {})["n"] == 2
    assert server.received == [("GET", "/api/v1/pods"), ("POST", "/api/v1/namespaces/ns/events")]
    assert server.connections == 2


def test_each_request_carries_the_bearer_token_as_refreshed(server_factory):
    server = server_factory()
    k = kube(server)
    configuration = k.api_client.configuration
    configuration.api_key, configuration.api_key_prefix = {"BearerToken": "t0"}, {"BearerToken": "Bearer"}
    refreshed = iter(range(1, 10))
    configuration.refresh_api_key_hook = lambda c: c.api_key.update(BearerToken=f"t{next(refreshed)}")
    k.get("/api/v1/pods")
    k.post("/api/v1/namespaces/ns/events", {})
    assert server.tokens == ["Bearer t1", "Bearer t2"]


def test_the_servers_path_prefixes_every_request(server_factory):
    server = server_factory()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.port}/k8s/clusters/c1/"
    Kube(client.ApiClient(configuration)).get("/api/v1/pods")
    assert server.received == [("GET", "/k8s/clusters/c1/api/v1/pods")]


def test_the_query_is_encoded_as_the_kubernetes_package_does():
    assert query_string({"watch": True, "limit": 500, "labelSelector": "a in (x, y),b!=c/d"}) == (
        "watch=true&limit=500&labelSelector=a%20in%20%28x%2C%20y%29%2Cb%21%3Dc/d")


def test_a_proxy_keeps_urllib3():
    configuration = client.Configuration()
    configuration.host = "https://10.0.0.1:6443"
    configuration.proxy = "http://proxy:3128"
    assert Connections.for_configuration(configuration) is None


def test_https_verifies_the_tls_server_name_when_one_is_set():
    configuration = client.Configuration()
    configuration.host = "https://10.0.0.1:6443/"
    configuration.tls_server_name = "kubernetes.default"
    connections = Connections.for_configuration(configuration)
    assert connections is not None and connections.context is not None
    assert (connections.host, connections.port, connections.server_name, connections.prefix) == (
        "10.0.0.1", 6443, "kubernetes.default", "")
    assert connections.context.check_hostname


def test_an_unreadable_client_certificate_fails_each_request_with_an_api_error(tmp_path):
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:6443"
    configuration.cert_file = str(tmp_path / "missing.crt")
    k = Kube(client.ApiClient(configuration))
    for _ in range(2):
        with pytest.raises(ApiError) as failed:
            k.get("/api/v1/pods")
        assert failed.value.status == 0 and "missing.crt" in str(failed.value)
