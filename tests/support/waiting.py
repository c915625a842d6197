"""Waiting in tests for what runs asynchronously (components, informers, servers, threads)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition",
               interval: float = 0.2, detail: Callable[[], str] | None = None) -> T:
    """``predicate()``'s first truthy value, asking every ``interval`` seconds; AssertionError naming ``what``
    (and ``detail()``, e.g. a process's log, read then) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            message = f"timed out after {timeout:.0f}s waiting for {what}"
            raise AssertionError(f"{message}\n{detail()}" if detail is not None else message)
        time.sleep(interval)
    return value
