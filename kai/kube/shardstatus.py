"""The status conditions of a SchedulingShard, written by the scheduler that serves it.

They are KAI's operator's conditions (:mod:`kai.kube.operatorstatus`), reported by the scheduler after
each attempt to apply the shard (with the Config).
"""

from __future__ import annotations

from kai.api import names
from kai.kube.client import Kube
from kai.kube.operatorstatus import operator_conditions, report_status


def shard_conditions(generation: int, error: str | None, previous: list[dict], now: str) -> list[dict]:
    """The conditions for ``generation`` applied (``error`` None) or not; a condition whose status did not
    change keeps its ``lastTransitionTime`` from ``previous``."""
    return operator_conditions(generation, error, previous, now)


def report_shard_status(kube: Kube, shard: dict, error: str | None) -> None:
    """Writes the conditions of ``shard`` (its identity and generation as the informer keeps them) unless they
    are already there; a failure is logged and scheduling goes on."""
    report_status(kube, names.SCHEDULINGSHARDS, shard, error)
