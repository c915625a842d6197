"""The PodGroup webhook keeps a semi-preemptible PodGroup's minimums from being raised."""

from __future__ import annotations

from kai.admission.podgroups import review


def podgroup(min_member=2, semi=True, label=False, subgroup_min=None):
    spec: dict = {"queue": "q", "minMember": min_member}
    meta: dict = {"name": "pg", "namespace": "ns"}
    if semi and label:
        meta["labels"] = {"kai.scheduler/preemptibility": "semi-preemptible"}
    elif semi:
        spec["preemptibility"] = "semi-preemptible"
    if subgroup_min is not None:
        del spec["minMember"]
        spec["minSubGroup"] = 1
        spec["subGroups"] = [{"name": "a", "minMember": subgroup_min}, {"name": "b", "minMember": 1}]
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": meta, "spec": spec}


def update(old, new):
    return review({"uid": "u", "kind": {"group": "scheduling.run.ai", "version": "v2alpha2", "kind": "PodGroup"},
                   "operation": "UPDATE", "namespace": "ns", "name": "pg", "object": new, "oldObject": old})


def test_raising_the_minimum_of_a_semi_preemptible_podgroup_is_refused():
    for label in (False, True):
        response = update(podgroup(2, label=label), podgroup(3, label=label))
        assert response["allowed"] is False
        assert "minMember of a semi-preemptible PodGroup cannot be increased (2 to 3)" in response["status"]["message"]
    response = update(podgroup(subgroup_min=2), podgroup(subgroup_min=4))
    assert 'subgroup "a": minMember' in response["status"]["message"]


def test_lowering_it_or_raising_that_of_another_podgroup_is_allowed():
    assert update(podgroup(3), podgroup(2))["allowed"] is True
    assert update(podgroup(2, semi=False), podgroup(3, semi=False))["allowed"] is True
