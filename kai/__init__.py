"""kai-scheduler: a GPU-aware batch scheduler for Kubernetes with a pluggy plugin SDK."""

import pluggy

__version__ = "0.2.0"

PROJECT = "kai"

#: Decorator for plugin hook implementations: ``@kai.hookimpl def kai_job_order(...)``.
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["hookimpl", "__version__"]
