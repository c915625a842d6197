"""The ``response`` of an ``AdmissionReview`` (``admission.k8s.io/v1``): allowed, or refused with a message,
either with warnings (which kubectl prints as ``Warning: ...``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kai.logs import fields

log = logging.getLogger(__name__)


def allow(request: dict, warnings: Sequence[str] = ()) -> dict:
    response: dict = {"uid": request.get("uid", ""), "allowed": True}
    if warnings:
        response["warnings"] = list(warnings)
    return response


def deny(request: dict, message: str, warnings: Sequence[str] = ()) -> dict:
    """Refused with HTTP 403 Forbidden, as KAI's webhooks refuse (the API server shows ``message``)."""
    log.info("refused", **fields(kind=kind(request), object=object_name(request), operation=request.get("operation"),
                                 reason=message))
    return {**allow(request, warnings), "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": message}}


def kind(request: dict) -> str:
    return (request.get("kind") or {}).get("kind", "")


def object_name(request: dict) -> str:
    """``namespace/name`` (``name`` for a cluster object); the generateName while the name is not yet set."""
    meta = (request.get("object") or {}).get("metadata") or {}
    name = request.get("name") or meta.get("name") or meta.get("generateName", "")
    namespace = request.get("namespace") or meta.get("namespace") or ""
    return f"{namespace}/{name}" if namespace else name


def refusal(request: dict, problem_of: Callable[[object], str | None]) -> str | None:
    """Why the request's object is refused (``problem_of(object)``), or None. On UPDATE only a change that
    makes the object invalid, or changes what is wrong with it, is refused: an object admitted before the
    webhook was registered can still be labelled, annotated and finalized by the controllers."""
    problem = problem_of(request.get("object"))
    if problem is not None and request.get("operation") == "UPDATE" and problem_of(request.get("oldObject")) == problem:
        return None
    return problem
