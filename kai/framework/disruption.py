"""The disruptions each PodDisruptionBudget still allows in a session, and which victim sets they forbid.

A session starts from every budget's ``allowed`` (its ``status.disruptionsAllowed``) and spends one of
each budget covering a pod for every eviction it commits, so one cycle evicts no more of a workload than
its budgets allow; the rest wait for later cycles, when the budgets have room again. The eviction actions
ask :meth:`Disruptions.forbidding` of each scenario's victims (those evicted for good and those moved,
whose pods go too) and treat a scenario a budget forbids as infeasible. Without budgets nothing is looked at.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import attrs

from kai.api import DisruptionBudget, Task


@attrs.define(frozen=True)
class Blocked:
    """A budget forbidding a victim set: the budget, the victims it covers, and the disruptions it has left."""

    budget: DisruptionBudget
    victims: tuple[Task, ...]
    left: int

    def message(self) -> str:
        pods = ", ".join(f"{t.namespace}/{t.name}" for t in self.victims)
        allowed = f"{self.left} disruption{'' if self.left == 1 else 's'} allowed"
        return (f"PodDisruptionBudget {self.budget.key} ({allowed}) forbids evicting "
                f"{len(self.victims)} of its pods: {pods}")


class Disruptions:
    """Each budget's disruptions left in one session (:meth:`spend` counts the committed evictions)."""

    def __init__(self, budgets: Sequence[DisruptionBudget]) -> None:
        self.budgets = tuple(budgets)
        self.left = {b.key: max(b.allowed, 0) for b in self.budgets}
        self._covering: dict[str, tuple[DisruptionBudget, ...]] = {}

    def covering(self, task: Task) -> tuple[DisruptionBudget, ...]:
        """The budgets covering ``task``'s pod."""
        if not self.budgets:
            return ()
        found = self._covering.get(task.uid)
        if found is None:
            found = self._covering[task.uid] = tuple(b for b in self.budgets if b.covers(task))
        return found

    def forbidding(self, victims: Iterable[Task]) -> Blocked | None:
        """The first budget (in budget order) that evicting all of ``victims`` would take below zero, or None."""
        if not self.budgets:
            return None
        covered: dict[str, list[Task]] = {}
        for t in victims:
            for b in self.covering(t):
                covered.setdefault(b.key, []).append(t)
        for b in self.budgets:
            tasks = covered.get(b.key, ())
            if len(tasks) > self.left[b.key]:
                return Blocked(b, tuple(tasks), self.left[b.key])
        return None

    def spend(self, evicted: Iterable[Task]) -> None:
        """Count committed evictions against the budgets covering their pods."""
        if not self.budgets:
            return
        spent = Counter(b.key for t in evicted for b in self.covering(t))
        for key, n in spent.items():
            self.left[key] -= n
