"""The bounds of the job solver's search (KAI v0.17's ``search_budget.go``, ``search_result.go``).

Time budgets nest: an action run has one deadline (``maxActionSearchDuration``); each job it solves gets
the action's remaining time, at most ``maxJobSearchDuration`` and at least ``minJobSearchDuration``;
each generator attempt within the job gets the job's remaining time, at most its own
``maxGeneratorSearchDuration``. A limit of 0 is no limit. Budgets are checked between scenarios only:
a scenario that started before a deadline is simulated to the end.

:func:`max_solvable_k` is KAI's search over how many of a job's tasks a generator can make room
for: doubling until a probe fails, then bisecting between the last success and the first failure.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from kai.framework.scenariosearch import DEFAULT, SearchBudgets

if TYPE_CHECKING:
    from kai.framework.statement import Statement

Clock = Callable[[], float]
UNLIMITED = float("inf")


class Reason(str, enum.Enum):
    """Why a search stopped (KAI's ``SearchResultReason``; the value is the metric label)."""

    SOLVED = "solved"
    DEADLINE_EXHAUSTED = "deadline_exhausted"
    GENERATORS_EXHAUSTED = "generators_exhausted"
    NO_GENERATOR = "no_generator"
    NOT_ATTEMPTED = "not_attempted"

    @property
    def stops_search(self) -> bool:
        """Whether no further probe or generator of the job is tried."""
        return self in (Reason.DEADLINE_EXHAUSTED, Reason.NOT_ATTEMPTED, Reason.NO_GENERATOR)

    @property
    def stops_action(self) -> bool:
        """Whether the action tries no further job (its budget is spent)."""
        return self in (Reason.DEADLINE_EXHAUSTED, Reason.NOT_ATTEMPTED)


@attrs.define(eq=False)
class SearchResult:
    """The outcome of a search: a statement when a scenario solved it (not committed), else None."""

    reason: Reason
    reduced_budget: bool = False
    statement: Statement | None = None
    #: The metric label when it differs from the reason (a job with nothing to place: ``not_attempted``).
    label: str | None = None

    @property
    def metric_result(self) -> str:
        return self.label or self.reason.value


class Deadline:
    """A point in time ``seconds`` from now on ``clock`` (infinite: never)."""

    __slots__ = ("clock", "at")

    def __init__(self, seconds: float, clock: Clock) -> None:
        self.clock = clock
        self.at = clock() + max(seconds, 0.0)

    def remaining(self) -> float:
        return max(self.at - self.clock(), 0.0)

    def exhausted(self) -> bool:
        return self.clock() >= self.at


def _limit(seconds: float) -> float:
    return seconds if seconds > 0 else UNLIMITED


class ActionBudget:
    """The search budget of one action run."""

    def __init__(self, budgets: SearchBudgets, action: str, clock: Clock = time.monotonic) -> None:
        self.job_limit, self.min_job = budgets.job, budgets.min_job
        self.generator_limits = budgets.generator_limits()
        self.clock = clock
        self.deadline = Deadline(_limit(budgets.action(action)), clock)

    def begin_job(self) -> JobBudget:
        remaining = self.deadline.remaining()
        seconds = min(remaining, _limit(self.job_limit))
        return JobBudget(Deadline(max(seconds, self.min_job), self.clock),
                         0 < self.job_limit and remaining < self.job_limit, self.generator_limits)

    def exhausted(self) -> bool:
        return self.deadline.exhausted()


@attrs.define(eq=False)
class JobBudget:
    """The search budget of one job; ``reduced`` when the action had less left than a job's budget."""

    deadline: Deadline
    reduced: bool
    generator_limits: dict[str, float]

    def exhausted(self) -> bool:
        return self.deadline.exhausted()

    def begin_generator(self, name: str) -> Deadline:
        limit = self.generator_limits.get(name, self.generator_limits.get(DEFAULT, 0.0))
        return Deadline(min(self.deadline.remaining(), _limit(limit)), self.deadline.clock)


def max_solvable_k(n: int, probe: Callable[[int], SearchResult]) -> tuple[int, SearchResult | None]:
    """The largest k in [1, n] for which ``probe(k)`` solved (0: none), and the last unsolved result.

    Probes k = 1, 2, 4, ... (n at most) until one fails, then bisects between the last success and
    that failure, assuming a step that can be placed has every smaller step placeable too. A result
    that stops the search ends it at once: ``(0, result)``.
    """
    lo, hi, k = 0, 0, 1
    last: SearchResult | None = None
    while True:
        result = probe(k)
        if result.reason.stops_search:
            return 0, result
        if result.reason is not Reason.SOLVED:
            last, hi = result, k
            break
        lo = k
        if k == n:
            return n, last
        k = min(k * 2, n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        result = probe(mid)
        if result.reason.stops_search:
            return 0, result
        if result.reason is Reason.SOLVED:
            lo = mid
        else:
            last, hi = result, mid
    return lo, last
