"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

Of the replicas sharing a lease name only the holder runs the control loops; the others stand by.
The holder renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it gives up
(the process then exits, as KAI's scheduler does). A lease not renewed for ``lease_duration`` may
be taken over. Expiry is judged on this process's own monotonic clock from the moment it last saw
the lease change, never by comparing another machine's timestamps, so clock skew between nodes
cannot cause two leaders. Writes use the lease's resourceVersion, so of two replicas racing for an
expired lease exactly one wins.

A standby watches its Lease (a watch on the one object, field selector ``metadata.name``) besides
reading it every ``retry_period``: it tries at once when the lease is released or deleted, and
again the moment the lease it last saw renewed expires. On graceful stop the holder releases the
lease (empty holder, 1 s duration), so a standby takes over within a round trip or two instead of
waiting for expiry or for its next periodic check. Without the watch (an error, no RBAC for it)
the periodic check still works.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from kai.kube.client import ApiError, Kube, object_path
from kai.kube.watch import Informer
from kai.logs import fields

log = logging.getLogger(__name__)

#: KAI's scheduler: lease 15 s, renew deadline 10 s, retry period 5 s.
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 5.0
#: How often waits look at the stop event and at what the watch saw.
POLL = 0.05


def default_identity() -> str:
    """``hostname_<random>``: unique per process, readable in ``kubectl get lease``."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time(wall: float) -> str:
    return datetime.fromtimestamp(wall, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for one Lease; :meth:`run` calls ``lead`` while this process holds it."""

    def __init__(self, kube: Kube, name: str, namespace: str, identity: str | None = None, *,
                 lease_duration: float = LEASE_DURATION, renew_deadline: float = RENEW_DEADLINE,
                 retry_period: float = RETRY_PERIOD, watch: bool = True,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError(f"leader election needs lease duration ({lease_duration}s) > renew deadline "
                             f"({renew_deadline}s) > retry period ({retry_period}s) > 0")
        # a request must not outlast a retry period, or renewal could overrun the renew deadline
        self.kube = Kube(kube.api_client, timeout=min(kube.timeout, retry_period))
        self.name, self.namespace = name, namespace
        self.identity = identity or default_identity()
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self._clock, self._wall = clock, wall
        self._path = object_path("coordination.k8s.io", "v1", "leases", namespace, name)
        self._observed: dict[str, Any] | None = None  # the lease as last read or written
        self._observed_spec: tuple | None = None
        self._observed_at = 0.0
        self._lock = threading.Lock()  # the watch's thread observes too
        #: Set by the watch when the lease is released or deleted: try at once.
        self._freed = threading.Event()
        self.watch = watch
        self.leading = False
        self.lost = False

    @property
    def state(self) -> str:
        return "lost" if self.lost else "leading" if self.leading else "standing by"

    # -- one round ----------------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One attempt to take or keep the lease; True when this process holds it afterwards."""
        now_wall = _micro_time(self._wall())
        try:
            lease = self.kube.get(self._path)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("cannot read leader lease", **self._ids(error=str(exc)))
                return False
            return self._create(now_wall)
        spec = lease.get("spec") or {}
        self._observe(lease)
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and not self._expired(spec):
            return False
        new_spec = dict(spec)
        new_spec.update(holderIdentity=self.identity, leaseDurationSeconds=int(round(self.lease_duration)),
                        renewTime=now_wall)
        if holder != self.identity:
            new_spec.update(acquireTime=now_wall, leaseTransitions=int(spec.get("leaseTransitions") or 0) + 1)
        lease["spec"] = new_spec
        try:
            self._observe(self.kube.request("PUT", self._path, body=lease))
        except ApiError as exc:
            if exc.status != 409:  # 409: another replica wrote first; it won this round
                log.warning("cannot update leader lease", **self._ids(error=str(exc)))
            return False
        return True

    def release(self) -> None:
        """Give the lease up (only if still held by this process)."""
        lease = self._observed
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        lease = dict(lease)
        lease["spec"] = dict(lease["spec"], holderIdentity="", leaseDurationSeconds=1,
                             renewTime=_micro_time(self._wall()))
        try:
            self.kube.request("PUT", self._path, body=lease)
            log.info("released leader lease", **self._ids())
        except ApiError as exc:
            log.warning("cannot release leader lease; it expires by itself", **self._ids(error=str(exc)))

    def _create(self, now_wall: str) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(round(self.lease_duration)),
                     "acquireTime": now_wall, "renewTime": now_wall, "leaseTransitions": 0},
        }
        try:
            self._observe(self.kube.post(object_path("coordination.k8s.io", "v1", "leases", self.namespace), body))
        except ApiError as exc:
            if exc.status != 409:
                log.warning("cannot create leader lease", **self._ids(error=str(exc)))
            return False
        return True

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = lease.get("spec") or {}
        key = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        with self._lock:
            if key != self._observed_spec:
                self._observed_spec, self._observed_at = key, self._clock()
            self._observed = lease

    def _expired(self, spec: dict[str, Any]) -> bool:
        return self._clock() >= self._expiry(spec)

    def _expiry(self, spec: dict[str, Any]) -> float:
        """When the lease as last seen expires, on this process's clock."""
        return self._observed_at + float(spec.get("leaseDurationSeconds") or self.lease_duration)

    def _on_watch(self, kind: str, lease: dict[str, Any]) -> None:
        """A change the watch saw: observed like a read; a release or a deletion wakes the standby."""
        if kind == "DELETED":
            self._freed.set()
            return
        self._observe(lease)
        if not (lease.get("spec") or {}).get("holderIdentity"):
            self._freed.set()

    # -- the campaign -------------------------------------------------------------------------
    def run(self, stop: threading.Event, lead: Callable[[threading.Event], None]) -> bool:
        """Stand by until leading, then call ``lead(leading_over)`` which must return once
        ``leading_over`` is set (on ``stop`` or on losing the lease). Returns False if the lease was lost."""
        log.info("standing by for leader lease", **self._ids())
        if not self._stand_by(stop):
            return True
        self.leading = True
        log.info("became leader", **self._ids())
        over = threading.Event()
        renewer = threading.Thread(target=self._renew_loop, args=(stop, over), name="lease-renewer", daemon=True)
        renewer.start()
        try:
            lead(over)
        finally:
            over.set()
            renewer.join()
            self.leading = False
            if not self.lost:
                self.release()
        return not self.lost

    def _stand_by(self, stop: threading.Event) -> bool:
        """Tries every retry period, when the watch sees the lease freed, and when it expires;
        True once this process holds the lease, False on ``stop``."""
        watch = None
        if self.watch:
            watch = Informer(self.kube, object_path("coordination.k8s.io", "v1", "leases", self.namespace),
                             field_selector=f"metadata.name={self.name}", on_event=self._on_watch,
                             name=f"lease {self.namespace}/{self.name}").start()
        try:
            while not stop.is_set():
                self._freed.clear()  # before reading: a release seen from now on wakes the wait below
                attempted = self._clock()
                if self.try_acquire_or_renew():
                    return True
                self._wait_for_chance(stop, attempted)
            return False
        finally:
            if watch is not None:
                watch.stop(timeout=1.0)

    def _wait_for_chance(self, stop: threading.Event, attempted: float) -> None:
        """Until the next retry period, the lease freed, or the lease seen expiring after ``attempted``."""
        due = attempted + self.retry_period
        while not (stop.is_set() or self._freed.is_set()):
            with self._lock:
                spec = (self._observed or {}).get("spec") or {}
                expiry = self._expiry(spec) if spec.get("holderIdentity") else due
            now = self._clock()
            if now >= due or attempted < expiry <= now:
                return
            self._freed.wait(POLL)

    def _renew_loop(self, stop: threading.Event, over: threading.Event) -> None:
        last_renew = next_try = time.monotonic()
        while not (over.wait(0.1) or stop.is_set()):  # short waits: notice either event promptly
            if time.monotonic() < next_try:
                continue
            next_try = time.monotonic() + self.retry_period
            if self.try_acquire_or_renew():
                last_renew = time.monotonic()
            elif time.monotonic() - last_renew >= self.renew_deadline:
                self.lost = True
                log.error("lost leader lease: not renewed within the renew deadline",
                          **self._ids(renew_deadline=self.renew_deadline))
                break
        over.set()

    def _ids(self, **extra: Any) -> dict[str, Any]:
        return fields(lease=f"{self.namespace}/{self.name}", identity=self.identity, **extra)
