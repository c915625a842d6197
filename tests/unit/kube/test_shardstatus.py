"""The SchedulingShard's conditions in KAI's operator vocabulary."""

from __future__ import annotations

from kai.kube.shardstatus import shard_conditions


def by_type(conditions: list[dict]) -> dict[str, dict]:
    return {c["type"]: c for c in conditions}


def test_an_applied_generation_is_deployed_available_and_ready():
    found = by_type(shard_conditions(3, None, [], "T1"))
    assert {t: c["status"] for t, c in found.items()} == {
        "Deployed": "True", "Available": "True", "DependenciesFulfilled": "True", "Ready": "True",
        "Reconciling": "False"}
    assert all(c["observedGeneration"] == 3 and c["lastTransitionTime"] == "T1" for c in found.values())
    assert found["Deployed"]["reason"] == "deployed" and found["Deployed"]["message"] == "Resources deployed"


def test_a_generation_that_could_not_be_applied_is_not_deployed_but_still_available():
    before = shard_conditions(3, None, [], "T1")
    found = by_type(shard_conditions(4, "SchedulingShard default: spec.x: bad", before, "T2"))
    assert found["Deployed"]["status"] == "False" and "spec.x: bad" in found["Deployed"]["message"]
    assert found["Ready"]["status"] == "False" and found["Ready"]["reason"] == "not_ready"
    assert found["Available"]["status"] == "True"
    # a transition time moves only when the status flips
    assert found["Deployed"]["lastTransitionTime"] == "T2" and found["Available"]["lastTransitionTime"] == "T1"
    assert all(c["observedGeneration"] == 4 for c in found.values())


def test_conditions_already_written_are_reproduced_exactly():
    first = shard_conditions(5, None, [], "T1")
    assert shard_conditions(5, None, first, "T9") == first
