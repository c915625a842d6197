"""Writes that report an outcome, run off the path of the worker that reached it: keyed lanes of threads.

A control loop whose workers should get on with the next object hands the writes that only report what
happened (a pod condition, an event) to :class:`Lanes`. ``submit(key, what, fn)`` runs ``fn`` on one of
``count`` threads, always the same one for the same ``key``, so the writes about one object land in the
order they were submitted. At most ``limit`` writes wait; beyond that a write is dropped and logged (as
client-go's event broadcaster drops events when its queue is full): reporting never holds up or exhausts
the component. An exception in ``fn`` is logged and the lane goes on.

Before :meth:`Lanes.start` (a controller driven by hand, one key at a time) ``submit`` runs ``fn`` at
once on the caller's thread. :meth:`Lanes.close` takes no more writes, lets those queued finish for at
most ``timeout`` seconds and drops the rest.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

from kai.logs import fields

log = logging.getLogger(__name__)

#: How many writes may wait, all lanes together, before new ones are dropped.
DEFAULT_LIMIT = 10_000


class Lanes:
    """``count`` threads named ``name-<i>``, each running the writes of the keys that hash to it in order."""

    def __init__(self, name: str, count: int = 4, limit: int = DEFAULT_LIMIT) -> None:
        if count < 1:
            raise ValueError(f"{name}: lanes must be at least 1, got {count}")
        self.name, self.count, self.limit = name, count, limit
        self._lock = threading.Lock()
        self._wake = [threading.Condition(self._lock) for _ in range(count)]
        self._idle = threading.Condition(self._lock)
        self._queues: list[deque[tuple[str, Callable[[], object]]]] = [deque() for _ in range(count)]
        self._waiting = 0  # queued, all lanes
        self._running = 0  # being run
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._abandoned = False
        #: Writes dropped because too many were waiting or the lanes were closed.
        self.dropped = 0

    def start(self) -> Lanes:
        self._threads = [threading.Thread(target=self._serve, args=(i,), name=f"{self.name}-{i}", daemon=True)
                         for i in range(self.count)]
        for thread in self._threads:
            thread.start()
        return self

    def submit(self, key: Hashable, what: str, fn: Callable[[], object]) -> bool:
        """Queue ``fn`` (described by ``what`` in log lines) behind the earlier writes of ``key``; False if dropped."""
        if not self._threads:
            self._run(what, fn)
            return True
        lane = hash(key) % self.count
        with self._lock:
            if self._closed or self._waiting >= self.limit:
                self.dropped += 1
                dropped, closed = self.dropped, self._closed
            else:
                self._queues[lane].append((what, fn))
                self._waiting += 1
                self._wake[lane].notify()
                return True
        if closed or dropped == 1 or dropped % 1000 == 0:
            log.warning(f"{self.name}: write dropped", **fields(
                write=what, key=str(key), reason="stopping" if closed else f"{self.limit} writes waiting",
                dropped=dropped))
        return False

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until every write submitted so far has run; False if some still wait after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._waiting or self._running:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float) -> bool:
        """Takes no more writes and runs the queued ones for at most ``timeout`` seconds; False if some were
        dropped or still run."""
        with self._lock:
            self._closed = True
            for wake in self._wake:
                wake.notify()
        finished = self.flush(timeout)
        with self._lock:
            self._abandoned = True
            left = self._waiting
            self.dropped += left
            self._waiting = 0
            for queue in self._queues:
                queue.clear()
            for wake in self._wake:
                wake.notify()
        if left:
            log.warning(f"{self.name}: stopped with writes not made", **fields(writes=left, timeout_seconds=timeout))
        return finished

    def _serve(self, lane: int) -> None:
        queue, wake = self._queues[lane], self._wake[lane]
        while True:
            with self._lock:
                while not queue and not self._closed and not self._abandoned:
                    wake.wait()
                if self._abandoned or not queue:
                    return
                what, fn = queue.popleft()
                self._waiting -= 1
                self._running += 1
            try:
                self._run(what, fn)
            finally:
                with self._lock:
                    self._running -= 1
                    if not self._waiting and not self._running:
                        self._idle.notify_all()

    def _run(self, what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001 - one report's failure must not stop the lane
            log.exception(f"{self.name}: write failed", **fields(write=what))
