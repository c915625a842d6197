"""The status conditions of a SchedulingShard, written by the scheduler that serves it.

KAI's operator reports on each SchedulingShard whether the shard's scheduler is deployed and available
for the shard's current generation; Helm's ``--wait``, kstatus and KAI's own e2e suites wait for these
conditions. There is no operator here, so the scheduler reports them itself after each attempt to apply
the shard (with the Config): once a generation is in force ``Deployed``, ``Available``,
``DependenciesFulfilled`` and ``Ready`` are true and ``Reconciling`` false; when it could not be
applied ``Deployed`` and ``Ready`` are false with the error, and ``Available`` stays true, since the
previous configuration keeps scheduling. Types, reasons and messages are KAI's.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from kai.api import names
from kai.kube.client import Kube, object_path
from kai.logs import fields

log = logging.getLogger(__name__)


def _condition(kind: str, ok: bool, reason: str, message: str) -> dict:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message}


def shard_conditions(generation: int, error: str | None, previous: list[dict], now: str) -> list[dict]:
    """The conditions for ``generation`` applied (``error`` None) or not; a condition whose status did not
    change keeps its ``lastTransitionTime`` from ``previous``."""
    applied = error is None
    wanted = [
        _condition("Deployed", applied, "deployed", "Resources deployed" if applied else f"not applied: {error}"),
        _condition("Available", True, "available", "System available"),
        _condition("DependenciesFulfilled", True, "dependencies_fulfilled", "Dependencies are fulfilled"),
        _condition("Ready", applied, "ready" if applied else "not_ready",
                   "System is ready" if applied else "System not ready"),
        _condition("Reconciling", False, "reconciled", "Reconciliation completed successfully"),
    ]
    before = {c.get("type"): c for c in previous if isinstance(c, dict)}
    for condition in wanted:
        old = before.get(condition["type"], {})
        condition["observedGeneration"] = generation
        condition["lastTransitionTime"] = (old.get("lastTransitionTime") or now
                                           if old.get("status") == condition["status"] else now)
    return wanted


def report_shard_status(kube: Kube, shard: dict, error: str | None) -> None:
    """Writes the conditions of ``shard`` (its identity and generation as the informer keeps them) unless they
    are already there; a failure is logged and scheduling goes on."""
    meta = shard.get("metadata") or {}
    path = object_path(*names.SCHEDULINGSHARDS, name=meta.get("name"))
    try:
        current = ((kube.get(path).get("status") or {}).get("conditions")) or []
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = shard_conditions(int(meta.get("generation") or 0), error, current, now)
        if conditions != current:
            kube.patch(path, {"status": {"conditions": conditions}}, subresource="status")
    except Exception as exc:  # noqa: BLE001 - a status that cannot be written must not keep settings from applying
        log.warning("cannot report the SchedulingShard's status", **fields(shard=meta.get("name"), error=str(exc)))
