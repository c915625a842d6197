"""The PodGroups the podgroupers create pass KAI v0.17's PodGroup admission rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai.admission.podgroups import problem
from kai.api.podgroup import GroupingError, OwnerReference, PodGroupMetadata, SubGroupMetadata
from kai.grouping.podgroups import podgroup_object
from kai.sim.podgroup_cases import UnsupportedCase, group_case, load_cases

CASES = Path(__file__).resolve().parents[2] / "conformance" / "podgrouper"


def grouped_cases() -> list:
    return [pytest.param(case, id=f"{path.stem}:{case.get('name', '?')}")
            for path in sorted(CASES.glob("*.yaml")) for case in load_cases(path)]



@pytest.mark.parametrize("case", grouped_cases())
def test_every_case_s_podgroup_is_admitted_on_create(case):
    try:
        metadata = group_case(case)
    except (GroupingError, UnsupportedCase):
        return  # the case expects no PodGroup
    refused, _ = problem(podgroup_object(metadata), "CREATE")
    assert refused is None


def test_a_parent_subgroup_carries_min_subgroup_or_nothing_never_min_member():
    owner = OwnerReference("batch/v1", "Job", "j", "uid")
    metadata = PodGroupMetadata(name="pg", namespace="ns", owner=owner, min_available=2, subgroups=[
        SubGroupMetadata("workers", min_available=2), SubGroupMetadata("w-0", min_available=1, parent="workers"),
        SubGroupMetadata("leaders", min_available=1, min_subgroup=1), SubGroupMetadata("l-0", 1, parent="leaders")])
    by_name = {sg["name"]: sg for sg in podgroup_object(metadata)["spec"]["subGroups"]}
    assert by_name["workers"] == {"name": "workers"}
    assert by_name["leaders"] == {"name": "leaders", "minSubGroup": 1}
    assert by_name["w-0"] == {"name": "w-0", "minMember": 1, "parent": "workers"}
