"""Raw JSON requests to the Kubernetes API server.

The ``kubernetes`` package provides configuration (kubeconfig, in-cluster service account, exec
plugins, token refresh); the generated models are skipped: bodies are encoded and decoded with
orjson. Requests go over :mod:`kai.kube.connections` (urllib3's pool manager when a proxy is
configured), watches over urllib3's pool. One :class:`Kube` is shared by every thread of a process
(both pools are thread-safe); Kubes made from the same ``ApiClient`` share its connections.

    kube = Kube.connect(kubeconfig=None)          # KUBECONFIG / ~/.kube/config, else in-cluster
    pod = kube.get("/api/v1/namespaces/ns/pods/p")  # dict, or raises ApiError
    kube.post("/apis/scheduling.run.ai/v1alpha2/namespaces/ns/bindrequests", body)
    kube.patch(path, {"status": {...}}, subresource="status")   # JSON merge patch
    with kube.stream(path, query) as resp: ...    # an unread urllib3 response (for watches)
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import orjson
import urllib3

from kai.kube.connections import Connections

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiError(RuntimeError):
    """A request failed: ``status`` is the HTTP status (0 when no response arrived)."""

    def __init__(self, method: str, path: str, status: int, reason: str, body: dict | None = None) -> None:
        self.status = status
        self.reason = reason
        self.body = body or {}
        message = self.body.get("message") or reason
        super().__init__(f"{method} {path}: {status} {message}")


_shared: weakref.WeakKeyDictionary[Any, Connections | None] = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def _connections(api_client: Any) -> Connections | None:
    """The connections of ``api_client``'s server, made once per client."""
    with _shared_lock:
        if api_client not in _shared:
            _shared[api_client] = Connections.for_configuration(
                api_client.configuration, api_client.configuration.connection_pool_maxsize or 64)
        return _shared[api_client]


def query_string(query: dict) -> str:
    """``query`` as the ``kubernetes`` package encodes it: booleans lower case, values percent-encoded."""
    return "&".join(f"{k}={quote(str(v).lower() if isinstance(v, bool) else str(v))}" for k, v in query.items())


class Kube:
    """A thin JSON client over an authenticated ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any, timeout: float = 30.0) -> None:
        self.api_client = api_client
        self.timeout = timeout
        #: Called with the verb of every request sent (a watch counts once), e.g. to count API calls.
        #: Called before each request is sent with its verb and :func:`api_resource`.
        self.on_request: Callable[[str, str], None] | None = None

    @classmethod
    def connect(cls, kubeconfig: str | os.PathLike | None = None, pool_size: int = 64) -> Kube:
        """Loads ``kubeconfig`` (else ``$KUBECONFIG`` or ``~/.kube/config``), falling back to the
        in-cluster service account when no kubeconfig exists."""
        from kubernetes import client, config

        configuration = client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        default = os.path.expanduser("~/.kube/config")
        if path or os.path.exists(default):
            config.load_kube_config(config_file=str(path or default), client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
        configuration.connection_pool_maxsize = pool_size
        return cls(client.ApiClient(configuration))

    @functools.cached_property
    def _connections(self) -> Connections | None:
        return _connections(self.api_client)

    def _started(self, method: str, path: str) -> None:
        """Runs before each request is sent (a watch counts once)."""
        if self.on_request is not None:
            self.on_request(method, api_resource(path))

    def _headers(self) -> dict[str, str]:
        """The client's default headers (User-Agent) and its bearer token, refreshed as configured."""
        headers = {**self.api_client.default_headers, "Accept": "application/json"}
        token = self.api_client.configuration.auth_settings().get("BearerToken")
        if token and token["value"]:
            headers[token["key"]] = token["value"]
        return headers

    def _urllib3(self, method: str, path: str, query: dict | None, data: bytes | None, headers: dict[str, str],
                 timeout: float) -> urllib3.BaseHTTPResponse:
        """An unread response from urllib3's pool (watches, and every request behind a proxy)."""
        url = self.api_client.configuration.host + path + (f"?{query_string(query)}" if query else "")
        try:
            response: urllib3.BaseHTTPResponse = self.api_client.rest_client.pool_manager.request(
                method, url, body=data, headers=headers, timeout=urllib3.Timeout(connect=10.0, read=timeout),
                preload_content=False, retries=False,
            )
            return response
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(method, path, 0, f"{type(exc).__name__}: {exc}") from exc

    def request(self, method: str, path: str, query: dict | None = None, body: Any = None,
                content_type: str = "application/json", timeout: float | None = None) -> dict:
        """The decoded reply of a request; raises :class:`ApiError` on a non-2xx status."""
        headers = self._headers()
        self._started(method, path)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = orjson.dumps(body)
        timeout = timeout or self.timeout
        try:
            connections = self._connections
        except (OSError, ValueError) as exc:  # an unreadable CA or client certificate, a malformed server URL
            raise ApiError(method, path, 0, f"{type(exc).__name__}: {exc}") from exc
        if connections is not None:
            try:
                status, reason, raw = connections.send(
                    method, path + (f"?{query_string(query)}" if query else ""), data, headers, timeout)
            except OSError as exc:
                raise ApiError(method, path, 0, f"{type(exc).__name__}: {exc}") from exc
        else:
            resp = self._urllib3(method, path, query, data, headers, timeout)
            try:
                raw = resp.read()
            except urllib3.exceptions.HTTPError as exc:
                raise ApiError(method, path, 0, f"{type(exc).__name__}: {exc}") from exc
            finally:
                resp.release_conn()
            status, reason = resp.status, resp.reason or ""
        try:
            decoded = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            decoded = {"message": raw[:200].decode(errors="replace")}
        if not 200 <= status < 300:
            raise ApiError(method, path, status, reason or "", decoded if isinstance(decoded, dict) else None)
        return decoded

    def get(self, path: str, query: dict | None = None) -> dict:
        return self.request("GET", path, query)

    def post(self, path: str, body: dict) -> dict:
        return self.request("POST", path, body=body)

    def patch(self, path: str, body: dict, subresource: str = "") -> dict:
        """A JSON merge patch of the object at ``path`` (or its ``subresource``)."""
        target = f"{path}/{subresource}" if subresource else path
        return self.request("PATCH", target, body=body, content_type=MERGE_PATCH)

    def delete(self, path: str, body: dict | None = None) -> dict:
        return self.request("DELETE", path, body=body)

    @contextlib.contextmanager
    def stream(self, path: str, query: dict, read_timeout: float) -> Iterator[urllib3.BaseHTTPResponse]:
        """An open streaming response (status checked); closed on exit."""
        headers = self._headers()
        self._started("GET", path)
        resp = self._urllib3("GET", path, query, None, headers, read_timeout)
        try:
            if not 200 <= resp.status < 300:
                raw = resp.read()
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    body = None
                raise ApiError("GET", path, resp.status, resp.reason or "", body if isinstance(body, dict) else None)
            yield resp
        finally:
            resp.close()  # an unfinished stream cannot go back to the pool


def object_path(group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None,
                subresource: str = "") -> str:
    """The REST path of a collection or of one object (``group`` "" is the core API)."""
    parts = ["/api", version] if not group else ["/apis", group, version]
    if namespace is not None:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
        if subresource:
            parts.append(subresource)
    return "/".join(parts)


def api_resource(path: str) -> str:
    """The resource a request's ``path`` is about, with its subresource (``pods/binding``); the path itself for a
    path outside the resource APIs (``/version``)."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api" and len(parts) > 2:
        parts = parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:
        parts = parts[3:]
    else:
        return path.split("?", 1)[0]
    if parts[0] == "namespaces" and len(parts) > 2:
        parts = parts[2:]
    return "/".join(parts[::2])
