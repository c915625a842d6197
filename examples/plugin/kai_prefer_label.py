"""kai-scheduler plugin ``preferlabel``: prefer nodes that carry one label."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kai.sdk import NodeInfo, ScoreHooks, Session, Task, hookimpl


class PreferLabel(ScoreHooks):
    """Adds ``weight`` to the score of every node labelled ``key=value``.

    Subclassing :class:`kai.sdk.ScoreHooks` lets a type checker hold the hook method to its hook's
    arguments and return type (``mypy examples/plugin``).
    """

    def __init__(self, key: str, value: str, weight: float):
        self.key, self.value, self.weight = key, value, weight

    @hookimpl
    def kai_node_scores(self, session: Session, task: Task, nodes: list[NodeInfo]) -> list[float]:
        return [self.weight if n.labels.get(self.key) == self.value else 0.0 for n in nodes]


def build(arguments: Mapping[str, Any]) -> PreferLabel:
    """The plugin for its configuration ``arguments``: ``label`` (``key=value``) and ``weight`` (default 1000)."""
    key, sep, value = str(arguments.get("label", "")).partition("=")
    if not key or not sep:
        raise ValueError(f"argument 'label' must be key=value, not {arguments.get('label')!r}")
    return PreferLabel(key, value, float(arguments.get("weight", 1000)))
