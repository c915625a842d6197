"""Keep-alive connections to the API server for :class:`kai.kube.client.Kube`'s requests.

``http.client`` on a small thread-safe pool of connections: about half the CPU of a request through
urllib3's pool manager, which matters at a few requests per placed pod. Watches keep urllib3's
streaming responses (their cost is per event, not per request).

    connections = Connections.for_configuration(configuration, maxsize=64)  # None behind a proxy
    status, reason, body = connections.send("GET", "/api/v1/pods?limit=500", None, headers, timeout=30.0)

A connection the server closed while it sat idle is replaced before use. A request that fails on a
reused connection before any response arrived is sent once more on a new connection when it is a
read (GET, HEAD): a write may have reached the server, so it is never sent twice; its failure is
the caller's to handle, as any other.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

#: Methods sent again after a reused connection turned out to be closed (they change nothing).
REPLAYABLE = frozenset({"GET", "HEAD"})
#: How a connection the server closed shows when a request is sent on it.
_CLOSED = (ConnectionError, ssl.SSLEOFError, http.client.BadStatusLine)


class _Connection(http.client.HTTPConnection):
    """A connection that speaks TLS when given a context, verifying the server as ``server_name``."""

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext | None,
                 server_name: str) -> None:
        super().__init__(host, port, timeout=timeout)
        self.context = context
        self.server_name = server_name
        if context is not None:
            self.default_port = http.client.HTTPS_PORT  # the Host header leaves out the default port

    def connect(self) -> None:
        super().connect()
        if self.context is not None:
            self.sock = self.context.wrap_socket(self.sock, server_hostname=self.server_name)


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
        Raises OSError or ``http.client.HTTPException`` when no whole response arrived."""
        target = self.prefix + target
        conn, reused = self._take()
        try:
            try:
                resp = self._exchange(conn, method, target, body, headers, timeout)
            except _CLOSED:
                if not reused or method not in REPLAYABLE:
                    raise
                conn.close()
                conn = self._open()
                resp = self._exchange(conn, method, target, body, headers, timeout)
            data = resp.read()
        except BaseException:
            conn.close()
            raise
        if resp.will_close or len(self._idle) >= self.maxsize:
            conn.close()
        else:
            self._idle.append(conn)
        return resp.status, resp.reason, data

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
        conn = _Connection(self.host, self.port, self.connect_timeout, self.context, self.server_name)
        conn.connect()
        return conn

    @staticmethod
    def _exchange(conn: _Connection, method: str, target: str, body: bytes | None, headers: dict[str, str],
                  timeout: float) -> http.client.HTTPResponse:
        conn.sock.settimeout(timeout)
        conn.request(method, target, body, headers)
        return conn.getresponse()


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
