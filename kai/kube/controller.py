"""The shape every control loop shares: informers, a work queue, N workers, readiness, stop and join.

A subclass names itself (``name``), says which informers it watches (:meth:`Controller.informers`,
built when it starts) and handles one key (:meth:`Controller.handle`, returning the delay before the
key is handled again, or None; an exception is logged and the key retried after 1, 2, 4 ... seconds,
at most ``error_delay``). ``run(stop)`` starts the informers and the workers, calls
:meth:`Controller.tick` every ``tick_period`` seconds until ``stop`` is set, then stops: the queue
is shut (no worker takes another key), the informers stop, and the workers finish the key they are
handling, for at most ``stop_timeout`` seconds together. A worker still busy after that is left
behind (a daemon thread; the process is about to exit): handling is level-triggered and its writes
are guarded by the API server (resourceVersion, UID preconditions, a pod bound once), so the next
leader handles that key again from the cluster's state. A key handled before every informer has
listed once is postponed when ``wait_for_sync`` is set: a sum over a partial list must not be
written as truth. A controller with ``settings`` (a :class:`kai.kube.kaiconfig.KaiObjects`) starts them
first, waits up to ``SETTINGS_WAIT`` for their first value, takes it up with :meth:`Controller.reconfigure`
and stops them when it stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from kai.kube.client import Kube
from kai.kube.kaiconfig import KaiObjects
from kai.kube.watch import Informer
from kai.kube.workqueue import WorkQueue, serve
from kai.logs import fields
from kai.metrics import ControllerMetrics, ReconcileMetrics

#: How long a key waits for the informers' first list when ``wait_for_sync`` is set.
SYNC_WAIT = 0.2
#: The retry of a key whose handling raised, seconds; it doubles with each failure in a row, up to
#: the controller's ``error_delay`` (an API server back from a restart is used within seconds).
FIRST_ERROR_DELAY = 1.0
#: How long a starting controller waits for its settings' first value before going on with its flags.
SETTINGS_WAIT = 5.0


class Controller:
    name = "controller"
    #: The log field naming a key in failure messages (``pod``, ``podgroup``, ...).
    key_field = "key"
    tick_period = 0.5
    wait_for_sync = False
    #: How long a stopping controller waits for its workers' keys in hand, seconds.
    stop_timeout = 3.0
    #: Settings followed while running (a KaiObjects), or None.
    settings: KaiObjects | None = None
    #: Where reconciles are measured (:meth:`instrument`), or None.
    reconciles: ReconcileMetrics | None = None

    def __init__(self, kube: Kube, *, workers: int = 1, error_delay: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if workers < 1:
            raise ValueError(f"{self.name} workers must be at least 1, got {workers}")
        self.kube = kube
        self.workers = workers
        self.error_delay = error_delay
        self._errors: dict[Hashable, int] = {}  # failures in a row, by key
        self._errors_lock = threading.Lock()
        self._settings_version = 0
        self._settings_lock = threading.Lock()
        self.queue = WorkQueue(clock=clock)
        self._clock = clock
        #: The running informers by name; tests may put in-memory stores here.
        self.stores: dict[str, Informer] = {}
        self.log = logging.getLogger(type(self).__module__)

    # -- what a controller defines -------------------------------------------------------------
    def informers(self) -> dict[str, Informer]:
        """The informers to run, by name, not yet started."""
        raise NotImplementedError

    def handle(self, key: Any) -> float | None:
        """Bring the object of ``key`` (of the controller's own key type) up to date; the delay before handling it
        again, or None."""
        raise NotImplementedError

    def tick(self) -> None:
        """Called every ``tick_period`` seconds while running (resyncs, sweeps)."""

    def reconfigure(self) -> bool:
        """Take up ``settings`` if they changed; whether they did."""
        return False

    def changed_settings(self) -> Any:
        """The value of ``settings`` when it changed since the last call, else None; of concurrent callers
        only one gets each new value."""
        settings = self.settings
        if settings is None or settings.version == self._settings_version:
            return None
        with self._settings_lock:
            if settings.version == self._settings_version:
                return None
            self._settings_version = settings.version
            return settings.value

    # -- shared --------------------------------------------------------------------------------
    def instrument(self, metrics: ControllerMetrics) -> None:
        """Measure the work queue and the reconciles in ``metrics``, under the controller's name."""
        self.queue.metrics = metrics.queue(self.name)
        self.reconciles = metrics.reconciler(self.name, self.workers)

    @property
    def synced(self) -> bool:
        return bool(self.stores) and all(i.synced.is_set() for i in self.stores.values())

    def ready(self) -> tuple[bool, str]:
        """Readiness: every informer has listed once."""
        if not self.stores:
            return False, "not started"
        missing = [name for name, i in self.stores.items() if not i.synced.is_set()]
        return (not missing, f"waiting for the first list of {', '.join(missing)}" if missing else "synced")

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set (following ``settings`` meanwhile, when there are)."""
        if self.settings is None:
            self._run(stop)
            return
        self.settings.start()
        try:
            if not self.settings.wait_applied(SETTINGS_WAIT):
                self.log.warning("Config not listed yet; going on with the settings of the flags")
            self.reconfigure()
            self._run(stop)
        finally:
            self.settings.stop()

    def _run(self, stop: threading.Event) -> None:
        self.stores = self.informers()
        for informer in self.stores.values():
            informer.start()
        threads = [threading.Thread(target=self._work, name=f"{self.name}-{i}", daemon=True)
                   for i in range(self.workers)]
        for thread in threads:
            thread.start()
        self.log.info(f"{self.name} started", **fields(workers=self.workers))
        try:
            while not stop.wait(self.tick_period):
                self.tick()
        finally:
            self._stop(threads)

    def _stop(self, workers: list[threading.Thread]) -> None:
        self.queue.shut_down()
        deadline = time.monotonic() + self.stop_timeout
        for informer in self.stores.values():
            informer.stop(timeout=max(0.0, deadline - time.monotonic()))
        for thread in workers:
            thread.join(max(0.0, deadline - time.monotonic()))
        busy = [t.name for t in workers if t.is_alive()]
        if busy:
            self.log.warning(f"{self.name} stopped with keys still being handled; the next leader handles them again",
                             **fields(workers=",".join(busy), timeout_seconds=self.stop_timeout))
        else:
            self.log.info(f"{self.name} stopped")

    def _work(self) -> None:
        serve(self.queue, self._handle, self.error_delay, self.log, f"{self.name} failed on an object",
              self.key_field)

    def _handle(self, key: Hashable) -> float | None:
        if self.wait_for_sync and not self.synced:
            return SYNC_WAIT
        reconciles, result, start = self.reconciles, "error", time.perf_counter()
        if reconciles is not None:
            reconciles.began()
        try:
            delay = self.handle(key)
            result = "success" if delay is None else "requeue_after"
        except Exception:  # noqa: BLE001 - a bug or an outage on one object must not stop the worker
            with self._errors_lock:
                failures = self._errors.get(key, 0)
                self._errors[key] = failures + 1
            self.log.exception(f"{self.name} failed on an object", **fields(**{self.key_field: key}))
            return min(self.error_delay, FIRST_ERROR_DELAY * 2.0**failures)
        finally:
            if reconciles is not None:
                reconciles.ended(result, time.perf_counter() - start)
        with self._errors_lock:
            self._errors.pop(key, None)
        return delay
