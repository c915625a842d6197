"""A work queue of object keys for controllers, with the guarantees of client-go's workqueue.

* A key waiting in the queue is held once however often it is added.
* A key is handed to one worker at a time: added while being processed, it is queued again only
  when that worker calls :meth:`WorkQueue.done`, so two workers never act on one object at once.
* :meth:`WorkQueue.add_after` delays a key (retry backoff); it joins the queue when due, unless
  already waiting there.

With ``metrics`` (a :class:`kai.metrics.WorkQueueMetrics`) the queue reports its adds, depth, waits,
work and retries as client-go's queue does.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

from kai.logs import fields
from kai.metrics import WorkQueueMetrics


class ShutDown(Exception):
    """The queue was shut down while a worker waited for a key."""


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()  # queued, or to re-queue when its worker is done
        self._processing: set[Hashable] = set()
        self._delayed: list[tuple[float, int, Hashable]] = []
        self._seq = 0
        self._shutdown = False
        self.metrics: WorkQueueMetrics | None = None

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def add(self, key: Hashable) -> None:
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        with self._cond:
            if self._shutdown:
                return
            if self.metrics is not None:
                self.metrics.retried()
            if delay <= 0:
                self._add_locked(key)
                return
            self._seq += 1
            heapq.heappush(self._delayed, (self._clock() + delay, self._seq, key))
            self._cond.notify()

    def get(self, timeout: float | None = None) -> Hashable | None:
        """The next key (now owned by the caller until :meth:`done`), None on timeout; raises ShutDown."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shutdown:
                    raise ShutDown
                self._promote_due_locked()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    if self.metrics is not None:
                        self.metrics.taken(key)
                    return key
                wait = self._delayed[0][0] - self._clock() if self._delayed else None
                if deadline is not None:
                    left = deadline - self._clock()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key: Hashable) -> None:
        with self._cond:
            self._processing.discard(key)
            if self.metrics is not None:
                self.metrics.done(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shut_down(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def _add_locked(self, key: Hashable) -> None:
        if self._shutdown or key in self._dirty:
            return
        if self.metrics is not None:
            self.metrics.added(key)
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify()

    def _promote_due_locked(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            self._add_locked(key)


def serve(queue: WorkQueue, handle: Callable[[Hashable], float | None], error_delay: float,
          log: logging.Logger, failure: str, field: str) -> None:
    """A worker: take keys from ``queue`` until it shuts down and ``handle`` each one.

    ``handle(key)`` returns the delay before the key is handled again, or None. An exception is
    logged (``failure``, naming the key as ``field``) and the key retried after ``error_delay``: a
    bug on one object must not stop the worker.
    """
    while True:
        try:
            key = queue.get()
        except ShutDown:
            return
        try:
            retry = handle(key)
        except Exception:  # noqa: BLE001
            log.exception(failure, **fields(**{field: key}))
            retry = error_delay
        finally:
            queue.done(key)
        if retry is not None:
            queue.add_after(key, retry)
