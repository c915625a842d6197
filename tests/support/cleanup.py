"""Removing what an end-to-end test created, whether or not it is still there."""

from __future__ import annotations

from kai.kube.client import ApiError, Kube


def delete_if_present(kube: Kube, path: str) -> None:
    """DELETE ``path``; an object that is already gone is fine, any other error is raised."""
    try:
        kube.delete(path)
    except ApiError as exc:
        if exc.status != 404:
            raise
