"""KAI's own tests replayed through the kernel, one pytest item each.

Every scheduling scenario of ``kai/*.yaml`` (KAI of March 2026) and ``kai-v017/*.yaml`` (the scenarios
KAI v0.17 added or changed; a changed one replaces its ``kai/`` version), ``kai-v017-dra/*.yaml`` (KAI v0.17's
DRA scenarios, in the format's DRA extension), ``kai-v017-more/*.yaml`` (the rest of KAI v0.17's new and changed
scenarios), ``project/*.yaml`` (this project's own: PodDisruptionBudgets, semi-preemptible jobs) and every
podgrouper case of
``podgrouper/*.yaml`` is an item named by its file and its name (``-k allocateGpuMemory`` selects a
file's scenarios). An item fails with the runner's mismatch message and is skipped with the runner's
reason when the scenario needs something not built.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from kai.sim.conformance import Runner
from kai.sim.podgroup_cases import load_cases, run_case
from kai.sim.scenario import load_scenarios

HERE = Path(__file__).parent
SCENARIOS = (HERE / "kai", HERE / "kai-v017", HERE / "kai-v017-dra", HERE / "kai-v017-more", HERE / "project")
PODGROUPER_CASES = HERE / "podgrouper"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".yaml" and file_path.parent in (*SCENARIOS, PODGROUPER_CASES):
        return ConformanceFile.from_parent(parent, path=file_path)
    return None


class ConformanceFile(pytest.File):
    """A scenario file or a podgrouper case file."""

    def collect(self):
        if self.path.parent == PODGROUPER_CASES:
            for case in load_cases(self.path):
                yield ConformanceItem.from_parent(self, name=case["name"], run=partial(run_case, case, str(self.path)))
        else:
            runner = _runner(self.config)
            for scenario in load_scenarios(str(self.path)):
                yield ConformanceItem.from_parent(self, name=scenario.name, run=partial(runner.result, scenario))


class Mismatch(Exception):
    """The runner's reason for failing a scenario or case."""


class ConformanceItem(pytest.Item):
    """One scenario or case; ``run()`` gives the runner's ``{"status", "reason", ...}``."""

    def __init__(self, *, run: Callable[[], dict], **kwargs):
        super().__init__(**kwargs)
        self.run = run

    def runtest(self) -> None:
        result = self.run()
        if result["status"] == "skipped":
            pytest.skip(result["reason"])
        if result["status"] != "passed":
            raise Mismatch(result["reason"])

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, Mismatch):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


_RUNNER = pytest.StashKey[Runner]()


def _runner(config: pytest.Config) -> Runner:
    """One runner per session, so each plugin configuration is built once."""
    if _RUNNER not in config.stash:
        config.stash[_RUNNER] = Runner()
    return config.stash[_RUNNER]
