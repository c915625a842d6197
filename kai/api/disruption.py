"""PodDisruptionBudgets as the scheduler sees them: which pods a budget covers and how many of them may go.

A budget (``policy/v1`` PodDisruptionBudget) covers the pods of its namespace that its label selector
matches (an empty selector: every pod there; a budget without one covers none). ``allowed`` is its
``status.disruptionsAllowed``, what the Eviction API grants before it refuses an eviction. This module
imports nothing else of ``kai.api`` but the selectors.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from kai.api.selectors import LabelSelector


class Pod(Protocol):
    """What a budget looks at of a pod."""

    namespace: str
    labels: dict[str, str]


@attrs.define(frozen=True)
class DisruptionBudget:
    """A PodDisruptionBudget: its name, the pods it covers, and the disruptions it allows now."""

    name: str
    namespace: str
    selector: LabelSelector
    allowed: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, pod: Pod) -> bool:
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)
