"""The process's HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` (alive) and ``/readyz`` (ready), and
the scheduler's visibility API (``/apis/visibility/v1/...``, JSON) on the metrics listener when one is attached.

Components may add routes of their own next to ``/metrics`` (:meth:`ObservabilityServer.add_route`): a
handler answers a body, its content type and extra headers, or None for a 404; and pages under a prefix
(:meth:`ObservabilityServer.add_pages`, e.g. the scheduler's console), whose handler is given the path with
its query and answers the status too. Every route is GET only.

Readiness is a list of named checks, each answering ``(ok, detail)``; ``/readyz`` returns 200 when
all pass and 503 with the failing ones otherwise, so a probe's log says what is not ready.

One server answers all three by default; ``routes`` splits them over two listeners, so that
``/metrics`` can listen on ``127.0.0.1`` only while the kubelet still reaches the probes.
:class:`HTTPServer` is the threading server of this one and of the admission webhook: a stop can
let the requests in progress finish, and a broken connection is a log line, not a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from prometheus_client import CONTENT_TYPE_LATEST

from kai.logs import fields
from kai.metrics import Registry, exposition

log = logging.getLogger(__name__)

#: KAI's scheduler serves metrics on ``--listen-address`` ``:8080`` (every interface).
DEFAULT_ADDRESS = ":8080"
METRICS, PROBES = "metrics", "probes"

Check = Callable[[], "tuple[bool, str]"]
#: Answers a GET of a visibility path (with its query): (HTTP status, JSON body).
Answer = Callable[[str], "tuple[int, dict]"]
VISIBILITY_PREFIX = "/apis/visibility/"
#: A route's handler: (body, content type, extra headers), or None when there is nothing to serve.
Route = Callable[[], "tuple[bytes, str, dict[str, str]] | None"]
#: The handler of the pages under a prefix: given the path with its query, (status, body, content type, headers).
Pages = Callable[[str], "tuple[int, bytes, str, dict[str, str]]"]


def parse_address(address: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port`` -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"address {address!r}: expected HOST:PORT or :PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


class HTTPServer(ThreadingHTTPServer):
    """A request per daemon thread; counts the requests in progress so that a stop can wait for them."""

    daemon_threads = True
    block_on_close = False  # server_close() does not join the request threads: drain() waits, bounded

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._busy = 0
        self._idle = threading.Condition()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._idle:  # counted on the accepting thread: a stop right after the accept still waits
            self._busy += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done()

    def _done(self) -> None:
        with self._idle:
            self._busy -= 1
            self._idle.notify_all()

    def drain(self, timeout: float) -> bool:
        """Closes the listening socket (a new connection is refused) and waits up to ``timeout`` seconds
        for the requests in progress; True if none is left. Call it while :meth:`serve_forever` runs."""
        self.shutdown()
        self.server_close()
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that fails its TLS handshake or drops the connection: one log line."""
        log.info("request failed", **fields(client=client_address[0], error=str(sys.exc_info()[1])))


class ObservabilityServer:
    """Serves the registry and the probes from a daemon thread; ``routes`` picks which of them."""

    def __init__(self, address: str, registry: Registry, ready_checks: dict[str, Check] | None = None,
                 routes: tuple[str, ...] = (METRICS, PROBES)) -> None:
        self.registry = registry
        self.ready_checks: dict[str, Check] = dict(ready_checks or {})
        self.routes = routes
        #: The visibility API's answers, served with the metrics (None: not served).
        self.visibility: Answer | None = None
        self.extra_routes: dict[str, Route] = {}
        self.pages: dict[str, Pages] = {}
        self._httpd = HTTPServer(parse_address(address), _handler(self))
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        return cast("tuple[str, int]", self._httpd.server_address[:2])  # an IP socket's (host, port)

    @property
    def port(self) -> int:
        return self.address[1]

    def add_ready_check(self, name: str, check: Check) -> None:
        self.ready_checks[name] = check

    def add_route(self, path: str, handler: Route) -> None:
        """Serve ``handler`` at ``path`` (with ``/metrics``)."""
        self.extra_routes[path] = handler

    def add_pages(self, prefix: str, handler: Pages) -> None:
        """Serve ``handler`` at every path under ``prefix`` (``/console/``; ``/console`` too), with ``/metrics``."""
        self.pages[prefix] = handler

    def pages_of(self, route: str) -> Pages | None:
        return next((h for prefix, h in self.pages.items()
                     if route.startswith(prefix) or route == prefix.rstrip("/")), None)

    def readiness(self) -> tuple[bool, list[str]]:
        lines, ok = [], True
        for name, check in list(self.ready_checks.items()):
            try:
                passed, detail = check()
            except Exception as exc:  # a broken check reports not ready instead of killing the probe
                passed, detail = False, f"check raised {exc!r}"
            ok &= passed
            lines.append(f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'failed'}: {detail}")
        return ok, lines

    def start(self) -> ObservabilityServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kai-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for serve_forever, which runs only once started
            self._httpd.shutdown()
        self._httpd.server_close()


def _handler(server: ObservabilityServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            route = self.path.split("?", 1)[0]
            metrics, probes = METRICS in server.routes, PROBES in server.routes
            if route == "/metrics" and metrics:
                self._reply(200, exposition(server.registry), CONTENT_TYPE_LATEST)
            elif route in ("/healthz", "/livez") and probes:
                self._reply(200, b"ok\n")
            elif route.startswith(VISIBILITY_PREFIX) and metrics and server.visibility is not None:
                status, answer = server.visibility(self.path)
                self._reply(status, json.dumps(answer).encode(), "application/json")
            elif route == "/readyz" and probes:
                ok, lines = server.readiness()
                body = "\n".join(lines + ["ready" if ok else "not ready"]) + "\n"
                self._reply(200 if ok else 503, body.encode())
            elif route in server.extra_routes and metrics:
                self._extra(server.extra_routes[route])
            elif metrics and (pages := server.pages_of(route)) is not None:
                self._page(pages)
            else:
                self._reply(404, b"not found\n")

        def _extra(self, handler: Route) -> None:
            try:
                answer = handler()
            except Exception as exc:  # noqa: BLE001 - a failing handler answers 500, the server goes on
                log.warning("route failed", **fields(route=self.path, error=str(exc)))
                self._reply(500, f"{exc}\n".encode())
                return
            if answer is None:
                self._reply(404, b"not found\n")
            else:
                self._reply(200, *answer)

        def _page(self, pages: Pages) -> None:
            try:
                status, body, content_type, headers = pages(self.path)
            except Exception as exc:  # noqa: BLE001 - a failing page answers 500, the server goes on
                log.warning("page failed", **fields(route=self.path, error=str(exc)))
                self._reply(500, b"the page failed; see the log\n")
                return
            self._reply(status, body, content_type, headers)

        def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
                   headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - probes every few seconds: stay quiet
            pass

    return Handler
