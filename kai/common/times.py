"""Times as the Kubernetes API writes them."""

from __future__ import annotations

import time


def rfc3339(seconds: float | None = None) -> str:
    """``seconds`` since the epoch (default: now) as an RFC 3339 UTC time to the second, like 2025-01-06T00:00:00Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if seconds is None else seconds))
