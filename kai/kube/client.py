"""Raw JSON requests to the Kubernetes API server.

The ``kubernetes`` package provides configuration (kubeconfig, in-cluster service account, exec
plugins, token refresh) and the connection pool; the generated models are skipped: bodies are
encoded and decoded with orjson. One :class:`Kube` is shared by every thread of a process
(urllib3's pool is thread-safe).

    kube = Kube.connect(kubeconfig=None)          # KUBECONFIG / ~/.kube/config, else in-cluster
    pod = kube.get("/api/v1/namespaces/ns/pods/p")  # dict, or raises ApiError
    kube.post("/apis/scheduling.run.ai/v1alpha2/namespaces/ns/bindrequests", body)
    kube.patch(path, {"status": {...}}, subresource="status")   # JSON merge patch
    with kube.stream(path, query) as resp: ...    # an unread urllib3 response (for watches)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import orjson
import urllib3

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


class Kube:
    """A thin JSON client over an authenticated ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any, timeout: float = 30.0) -> None:
        self.api_client = api_client
        self.timeout = timeout
        #: Called with the verb of every request sent (a watch counts once), e.g. to count API calls.
        self.on_request: Callable[[str], None] | None = None

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

    def _request(
        self,
        method: str,
        path: str,
        query: dict | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: Any = None,
    ) -> urllib3.BaseHTTPResponse:
        _, url, headers, _, _ = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        data = None
        if self.on_request is not None:
            self.on_request(method)
        if body is not None:
            headers["Content-Type"] = content_type
            data = orjson.dumps(body)
        try:
            return self.api_client.rest_client.pool_manager.request(
                method,
                url,
                body=data,
                headers=headers,
                timeout=urllib3.Timeout(connect=10.0, read=timeout or self.timeout),
                preload_content=False,
                retries=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(method, path, 0, f"{type(exc).__name__}: {exc}") from exc

    def request(self, method: str, path: str, query: dict | None = None, body: Any = None, **kw: Any) -> dict:
        """The decoded reply of a request; raises :class:`ApiError` on a non-2xx status."""
        resp = self._request(method, path, query, body, **kw)
        try:
            raw = resp.read()
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(method, path, 0, f"{type(exc).__name__}: {exc}") from exc
        finally:
            resp.release_conn()
        try:
            decoded = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            decoded = {"message": raw[:200].decode(errors="replace")}
        if not 200 <= resp.status < 300:
            raise ApiError(method, path, resp.status, resp.reason or "", decoded if isinstance(decoded, dict) else None)
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
        resp = self._request("GET", path, query, timeout=read_timeout)
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
