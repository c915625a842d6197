"""The status conditions KAI's operator writes on its objects (``Config``, ``SchedulingShard``).

KAI's operator reports on each of them whether the components it configures are deployed and available
for the object's current generation; Helm's ``--wait``, kstatus and KAI's own e2e suites wait for these
conditions. There is no operator here, so the components report them after each attempt to apply the
object: once a generation is in force ``Deployed``, ``Available``, ``DependenciesFulfilled`` and ``Ready``
are true and ``Reconciling`` false; when it could not be applied ``Deployed`` and ``Ready`` are false with
the error, and ``Available`` stays true, since the previous configuration stays in force. Types, reasons
and messages are KAI's.
"""

from __future__ import annotations

import logging

from kai.common.times import rfc3339
from kai.kube.client import Kube, object_path
from kai.logs import fields

log = logging.getLogger(__name__)


def _condition(kind: str, ok: bool, reason: str, message: str) -> dict:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message}


def operator_conditions(generation: int, error: str | None, previous: list[dict], now: str) -> list[dict]:
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


def report_status(kube: Kube, resource: tuple[str, str, str], obj: dict, error: str | None) -> None:
    """Writes the conditions of ``obj`` (a cluster-scoped object of ``resource``, (group, version, plural), with
    its name and generation as the informer keeps them) unless they are already there; a failure is logged
    and the component goes on."""
    meta = obj.get("metadata") or {}
    path = object_path(*resource, name=meta.get("name"))
    try:
        current = ((kube.get(path).get("status") or {}).get("conditions")) or []
        conditions = operator_conditions(int(meta.get("generation") or 0), error, current, rfc3339())
        if conditions != current:
            kube.patch(path, {"status": {"conditions": conditions}}, subresource="status")
    except Exception as exc:  # noqa: BLE001 - a status that cannot be written must not keep settings from applying
        log.warning("cannot report the status", **fields(kind=obj.get("kind"), name=meta.get("name"),
                                                          error=str(exc)))
