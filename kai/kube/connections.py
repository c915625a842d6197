"""Keep-alive connections to the API server for :class:`kai.kube.client.Kube`'s requests.

A small thread-safe pool of sockets (TLS when the server speaks it) on which a request is written with one
send and its response is parsed by ``httptools`` (the C parser of llhttp): about a third of the CPU of a
request through ``http.client``, most of whose cost is in Python, which matters at a few requests per placed
pod. Watches keep urllib3's streaming responses (their cost is per event, not per request).

    connections = Connections.for_configuration(configuration, maxsize=64)  # None behind a proxy
    status, reason, body = connections.send("GET", "/api/v1/pods?limit=500", None, headers, timeout=30.0)

A response is read by its framing (Content-Length or chunked, as the API server sends them); a connection is
kept unless the response says it closes. A connection the server closed while it sat idle is replaced
before use. A request that fails on a reused connection before any response arrived is sent once more on a
new connection when it is a read (GET): a write may have reached the server, so it is never sent twice; its
failure is the caller's to handle, as any other.
"""

from __future__ import annotations

import select
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

import httptools

#: Methods sent again after a reused connection turned out to be closed (they change nothing).
REPLAYABLE = frozenset({"GET"})
#: How a connection the server closed shows when a request is sent on it.
_CLOSED = (ConnectionError, ssl.SSLEOFError)
#: Bytes asked of the socket per read.
_READ = 65536


class _Response:
    """What the parser reports of one response."""

    __slots__ = ("parser", "status", "reason", "keep", "body", "done")

    def __init__(self) -> None:
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self.status = 0
        self.reason = b""
        self.keep = False
        self.body: list[bytes] = []
        self.done = False

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_headers_complete(self) -> None:
        parser = self.parser
        assert parser is not None
        self.status, self.keep = parser.get_status_code(), parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class _Connection:
    """One connection: TLS when given a context, verifying the server as ``server_name``."""

    __slots__ = ("sock", "host_header")

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext | None,
                 server_name: str, host_header: str) -> None:
        sock = socket.create_connection((host, port), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = context.wrap_socket(sock, server_hostname=server_name) if context is not None else sock
        except BaseException:
            sock.close()
            raise
        self.host_header = host_header

    def exchange(self, method: str, target: str, body: bytes | None, headers: dict[str, str],
                 timeout: float) -> tuple[int, str, bytes, bool]:
        """(status, reason, body, whether the connection can be kept) of one request on this connection.
        Raises ConnectionError when the server closed it before any of the response arrived."""
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        lines.append("\r\n")
        request = "\r\n".join(lines).encode("latin-1")
        sock = self.sock
        sock.settimeout(timeout)
        sock.sendall(request if body is None else request + body)
        response = _Response()
        received = False
        while not response.done:
            data = sock.recv(_READ)
            if not data:
                if received:
                    raise OSError("the server closed the connection in the middle of a response")
                raise ConnectionError("the server closed the connection before responding")
            received = True
            try:
                response.parser.feed_data(data)  # type: ignore[union-attr]
            except httptools.HttpParserError as exc:
                raise OSError(f"malformed response: {exc}") from exc
        response.parser = None  # no cycle left for the collector
        return response.status, response.reason.decode("latin-1"), b"".join(response.body), response.keep

    def close(self) -> None:
        self.sock.close()


class Connections:
    """Idle keep-alive connections to one server, taken by one request at a time; at most
    ``maxsize`` are kept (more are opened when needed, and closed after their request)."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None = None, server_name: str = "",
                 prefix: str = "", maxsize: int = 64, connect_timeout: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.context = context
        self.server_name = server_name or host
        #: The path of the server's URL, put before every request path.
        self.prefix = prefix
        self.maxsize = maxsize
        self.connect_timeout = connect_timeout
        self._idle: list[_Connection] = []  # list.append and list.pop are atomic

    @classmethod
    def for_configuration(cls, configuration: Any, maxsize: int = 64) -> Connections | None:
        """Connections as the ``kubernetes`` package's ``configuration`` describes them (host, CA,
        client certificate, ``verify_ssl``, ``tls_server_name``); None when requests go through a proxy."""
        if getattr(configuration, "proxy", None):
            return None
        url = urlsplit(configuration.host)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"cannot connect to {configuration.host!r}: not an http(s) URL")
        context = None
        if url.scheme == "https":
            try:
                context = _tls_context(configuration)
            except OSError as exc:  # ssl.SSLError included
                files = ", ".join(f"{what} {name}" for what, name in (
                    ("CA", configuration.ssl_ca_cert), ("certificate", configuration.cert_file),
                    ("key", configuration.key_file)) if name)
                raise OSError(f"cannot read the TLS files ({files}): {exc}") from exc
        assert_hostname = configuration.assert_hostname if isinstance(configuration.assert_hostname, str) else ""
        server_name = configuration.tls_server_name or assert_hostname or url.hostname
        default_port = 443 if context is not None else 80
        return cls(url.hostname, url.port or default_port, context, server_name, url.path.rstrip("/"), maxsize)

    def send(self, method: str, target: str, body: bytes | None, headers: dict[str, str],
             timeout: float) -> tuple[int, str, bytes]:
        """(status, reason, body) of one request; ``target`` is the path and query after :attr:`prefix`.
        Raises OSError when no whole response arrived."""
        target = self.prefix + target
        conn, reused = self._take()
        try:
            try:
                status, reason, data, keep = conn.exchange(method, target, body, headers, timeout)
            except _CLOSED:
                if not reused or method not in REPLAYABLE:
                    raise
                conn.close()
                conn = self._open()
                status, reason, data, keep = conn.exchange(method, target, body, headers, timeout)
        except BaseException:
            conn.close()
            raise
        if not keep or len(self._idle) >= self.maxsize:
            conn.close()
        else:
            self._idle.append(conn)
        return status, reason, data

    def _take(self) -> tuple[_Connection, bool]:
        """An idle connection still open (and True), else a new one (and False)."""
        while True:
            try:
                conn = self._idle.pop()
            except IndexError:
                return self._open(), False
            if not _closed_by_server(conn.sock):
                return conn, True
            conn.close()

    def _open(self) -> _Connection:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        if self.port != (443 if self.context is not None else 80):
            host = f"{host}:{self.port}"
        return _Connection(self.host, self.port, self.connect_timeout, self.context, self.server_name, host)


def _tls_context(configuration: Any) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data)
    if not configuration.verify_ssl or configuration.assert_hostname is False:
        context.check_hostname = False
    if not configuration.verify_ssl:
        context.verify_mode = ssl.CERT_NONE
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context


def _closed_by_server(sock: socket.socket | None) -> bool:
    """Whether an idle connection can no longer be used: readable means the server closed it (or sent
    something unasked, which leaves the connection unusable as well)."""
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
