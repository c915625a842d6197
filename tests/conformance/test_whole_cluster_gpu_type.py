"""KAI's scenarios with one GPU type that covers every node, given by every queue with its own GPU quota, limit and
over-quota weight: the division, placement, queue order and reclaim per type then agree with those on the totals,
so every scenario's outcome is KAI's still."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai.sim.conformance import Runner
from kai.sim.scenario import Scenario, load_scenarios

HERE = Path(__file__).parent
FILES = sorted(p for folder in ("kai", "kai-v017", "kai-v017-more") for p in (HERE / folder).glob("*.yaml"))
LABEL = {"pool": "whole-cluster"}


def with_whole_cluster_type(data: dict) -> dict:
    nodes = {name: {**(node or {}), "labels": {**((node or {}).get("labels") or {}), **LABEL}}
             for name, node in (data.get("nodes") or {}).items()}
    queues = [{**q, "resource_types": [{
        "name": "whole-cluster", "node_selector": LABEL, "deserved_gpus": q.get("deserved_gpus", 0.0),
        "max_allowed_gpus": q.get("max_allowed_gpus", -1), "over_quota_weight": q.get("over_quota_weight", 0.0)}]}
        for q in data.get("queues") or ()]
    return {**data, "nodes": nodes, "queues": queues}


@pytest.fixture(scope="module")
def runner() -> Runner:
    return Runner()


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_a_type_covering_the_cluster_changes_no_outcome(path, runner):
    failed = []
    for scenario in load_scenarios(str(path)):
        if runner.missing(scenario):
            continue
        typed = Scenario(scenario.name, scenario.file, with_whole_cluster_type(scenario.data))
        result = runner.result(typed)
        if result["status"] != "passed":
            failed.append(f"{scenario.name}: {result['reason']}")
    assert not failed, "\n".join(failed)
