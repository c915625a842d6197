"""Client-side request rate limit (``--qps``/``--burst``) for a :class:`~kai.kube.client.Kube`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kai.kube.client import Kube


class TokenBucket:
    """``qps`` requests per second on average, bursts of up to ``burst``; ``qps <= 0`` means no limit."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._tokens = float(self.burst)
        self._clock, self._sleep = clock, sleep
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, sleeping until it is due; returns the seconds slept."""
        if self.qps <= 0:
            return 0.0
        with self._lock:  # reserve the token now, sleep outside the lock
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps) - 1.0
            self._last = now
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


class ThrottledKube(Kube):
    """A :class:`Kube` sharing another's connection pool, each request first taking a token."""

    def __init__(self, kube: Kube, limiter: TokenBucket) -> None:
        super().__init__(kube.api_client, kube.timeout)
        self.on_request = getattr(kube, "on_request", None)
        self.limiter = limiter

    def _started(self, method: str, path: str) -> None:
        self.limiter.acquire()
        super()._started(method, path)
