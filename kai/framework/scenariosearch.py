"""KAI's bounded scenario search: its budgets (``scenarioSearchBudgets``) and what one session's search did.

The eviction actions' job solver stops looking for victims when a time budget runs out
(:mod:`kai.actions.search`). The budgets are configured in KAI's shape, in the scheduler
configuration file or a SchedulingShard's ``spec``::

    scenarioSearchBudgets:
      maxActionSearchDuration: {default: 5m, reclaim: 5m, preempt: 5m, consolidation: 5m}
      maxJobSearchDuration: 4m
      minJobSearchDuration: 0s
      maxGeneratorSearchDuration: {default: 2m, NodeLocalGreedy: 30s, MultiNodeGang: 2m}

Every value is a non-negative Go duration; ``0s`` is no limit (for ``minJobSearchDuration``: no floor).
Unset fields take KAI's defaults (above). ``minJobSearchDuration`` must be below ``maxJobSearchDuration``
unless the latter is unlimited. :class:`SearchLog` holds what a session's searches did, for the metrics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs

from kai.common.durations import parse_duration
from kai.common.errors import ConfigError
from kai.common.yamlfile import Fields, describe

DEFAULT = "default"
#: The keys of ``maxActionSearchDuration``: the three eviction actions and the fallback.
ACTION_KEYS = (DEFAULT, "reclaim", "preempt", "consolidation")
NODE_LOCAL_GREEDY, MULTI_NODE_GANG = "NodeLocalGreedy", "MultiNodeGang"
#: The keys of ``maxGeneratorSearchDuration``: the generators and the fallback.
GENERATOR_KEYS = (DEFAULT, NODE_LOCAL_GREEDY, MULTI_NODE_GANG)
#: KAI's defaults, in seconds.
DEFAULT_ACTION_BUDGET, DEFAULT_JOB_BUDGET, DEFAULT_MIN_JOB_BUDGET = 300.0, 240.0, 0.0
DEFAULT_GENERATOR_BUDGETS = {DEFAULT: 120.0, NODE_LOCAL_GREEDY: 30.0, MULTI_NODE_GANG: 120.0}
FIELDS = ("maxActionSearchDuration", "maxJobSearchDuration", "minJobSearchDuration", "maxGeneratorSearchDuration")


@attrs.define(frozen=True)
class SearchBudgets:
    """The configured budgets in seconds (0: no limit); the per-name maps hold only what is configured."""

    actions: tuple[tuple[str, float], ...] = ()
    job: float = DEFAULT_JOB_BUDGET
    min_job: float = DEFAULT_MIN_JOB_BUDGET
    generators: tuple[tuple[str, float], ...] = ()

    def action(self, action: str) -> float:
        """The action's budget: its own, else the configured ``default``, else KAI's default."""
        configured = dict(self.actions)
        return configured.get(action, configured.get(DEFAULT, DEFAULT_ACTION_BUDGET))

    def generator_limits(self) -> dict[str, float]:
        """Every generator's budget by name, ``default`` included (KAI's resolution: a configured
        ``default`` also replaces the built-in budgets of the generators not configured by name)."""
        configured = dict(self.generators)
        if DEFAULT in configured:
            limits = {name: configured[DEFAULT] for name in GENERATOR_KEYS}
        else:
            limits = dict(DEFAULT_GENERATOR_BUDGETS)
        limits.update(configured)
        return limits


def parse_search_budgets(data: Any, where: str) -> SearchBudgets:
    """``scenarioSearchBudgets`` (None: KAI's defaults); ConfigError names the field."""
    if data is None:
        return SearchBudgets()
    fields = Fields(data, f"{where}: scenarioSearchBudgets", FIELDS)
    actions = _durations(fields, "maxActionSearchDuration", ACTION_KEYS)
    generators = _durations(fields, "maxGeneratorSearchDuration", GENERATOR_KEYS)
    job = _duration(fields, "maxJobSearchDuration", DEFAULT_JOB_BUDGET)
    min_job = _duration(fields, "minJobSearchDuration", DEFAULT_MIN_JOB_BUDGET)
    if job and min_job >= job:
        raise fields.fail("minJobSearchDuration", "must be less than maxJobSearchDuration")
    return SearchBudgets(actions, job, min_job, generators)


def _duration(fields: Fields, key: str, default: float) -> float:
    if not fields.has(key):
        return default
    return _seconds(fields.data[key], partial(_fail, fields, key))


def _durations(fields: Fields, key: str, names: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    out = []
    for name, value in fields.mapping(key).items():
        if name not in names:
            raise fields.fail(key, f"names {describe(name)}; the known names are {', '.join(names)}")
        out.append((name, _seconds(value, partial(_fail, fields, f"{key}.{name}"))))
    return tuple(out)


def _fail(fields: Fields, key: str, message: str) -> ConfigError:
    return fields.fail(key, message)


def _seconds(value: Any, fail: Callable[[str], ConfigError]) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise fail(f"must be a duration (like 30s, 5m), not {describe(value)}") from None
    if seconds < 0:
        raise fail(f"must not be negative, not {describe(value)}")
    return seconds


class SearchLog:
    """What the job solver's bounded searches did in one session, by KAI's metric labels."""

    def __init__(self) -> None:
        #: (action, result, reduced_budget) -> jobs searched.
        self.jobs: Counter[tuple[str, str, bool]] = Counter()
        #: (action, generator, state) -> scenarios (states: emitted, duplicate, simulated, validator_rejected).
        self.scenarios: Counter[tuple[str, str, str]] = Counter()
        #: (action, generator, result, seconds) of every scenario attempt.
        self.durations: list[tuple[str, str, str, float]] = []
        #: action -> times a job's search stopped because the action's budget was spent.
        self.action_exhausted: Counter[str] = Counter()
        #: action -> scenarios simulated (KAI's ``scenarios_simulation_by_action``).
        self.simulated: Counter[str] = Counter()
        #: action -> scenarios a cheap filter rejected before simulation (``scenarios_filtered_by_action``).
        self.filtered: Counter[str] = Counter()
        #: The budgets configured when each action ran (seconds): action -> budget, per job, generator -> budget.
        self.action_budgets: dict[str, float] = {}
        self.job_budget: float | None = None
        self.generator_budgets: dict[str, float] = {}

    def configured(self, action: str, budgets: SearchBudgets) -> None:
        self.action_budgets[action] = budgets.action(action)
        self.job_budget = budgets.job
        self.generator_budgets.update(budgets.generator_limits())
