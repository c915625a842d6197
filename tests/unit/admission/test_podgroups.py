"""KAI's PodGroup webhook: the subgroup tree and the gang minimums, with KAI's messages, and which faults
are only warnings on CREATE and on UPDATE."""

from __future__ import annotations

import pytest

from kai.admission.podgroups import review


def sg(name, parent=None, min_member=None, min_subgroup=None):
    out: dict = {"name": name}
    if parent is not None:
        out["parent"] = parent
    if min_member is not None:
        out["minMember"] = min_member
    if min_subgroup is not None:
        out["minSubGroup"] = min_subgroup
    return out


def podgroup(*subgroups, **spec):
    body = {"queue": "team-a", **spec}
    if subgroups:
        body["subGroups"] = list(subgroups)
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ns"}, "spec": body}


def request(obj, operation="CREATE", old=None):
    return {"uid": "u-pg", "kind": {"group": "scheduling.run.ai", "version": "v2alpha2", "kind": "PodGroup"},
            "operation": operation, "namespace": "ns", "name": "pg", "object": obj, "oldObject": old}


def refused(response) -> str:
    assert response["allowed"] is False and response["status"]["code"] == 403
    return response["status"]["message"]


#: A two-level tree as KAI's podgroupers build it: minSubGroup on the inner nodes, minMember on the leaves.
GOOD = podgroup(sg("decode", min_subgroup=1), sg("prefill", min_subgroup=2),
                sg("decode-0", "decode", min_member=4), sg("prefill-0", "prefill", min_member=2),
                sg("prefill-1", "prefill", min_member=2), minSubGroup=2)


def test_a_well_formed_tree_is_admitted_without_warnings():
    assert review(request(GOOD)) == {"uid": "u-pg", "allowed": True}
    assert review(request(podgroup(minMember=3)))["allowed"] is True
    assert review(request(podgroup(sg("a", min_member=1), sg("b", min_member=0), minMember=2)))["allowed"] is True


def test_min_member_and_min_subgroup_together_are_refused():
    bad = podgroup(sg("a", min_member=1), minMember=3, minSubGroup=1)
    assert refused(review(request(bad))) == (
        "minMember and minSubGroup are mutually exclusive: set minMember (3) to schedule a fixed number of pods, "
        "or set minSubGroup to require a minimum number of child SubGroups, but not both")
    on_subgroup = podgroup(sg("a", min_member=1, min_subgroup=1), sg("b", "a", min_member=1))
    assert refused(review(request(on_subgroup))) == 'subgroup "a": minMember and minSubGroup are mutually exclusive'


@pytest.mark.parametrize(("subgroups", "message"), [
    ([sg("a", min_member=1), sg("a", min_member=2)], "duplicate subgroup name a"),
    ([sg("a", min_member=1), sg("b", "nope", min_member=1)], "parent nope of b was not found"),
    ([sg("a", "b", min_subgroup=1), sg("b", "a", min_subgroup=1), sg("c", "a", min_member=1)],
     "cycle detected in subgroups"),
    ([sg("a", "a", min_member=1)], "cycle detected in subgroups"),
])
def test_structural_faults_of_the_tree_are_refused(subgroups, message):
    assert refused(review(request(podgroup(*subgroups)))) == message
    assert refused(review(request(podgroup(*subgroups), "UPDATE", old=GOOD))) == message


def test_every_leaf_and_min_field_fault_is_reported_one_per_line_in_name_order():
    bad = podgroup(sg("z-leaf", min_subgroup=1), sg("mid", min_member=2), sg("b-leaf", "mid"),
                   sg("a-leaf", "mid", min_member=1))
    assert refused(review(request(bad))).split("\n") == [
        "subgroup b-leaf: minMember is required",
        'subgroup "mid": minMember cannot be set on a mid-level SubGroup (has child SubGroups); use minSubGroup '
        "instead",
        'subgroup "z-leaf": minSubGroup cannot be set on a leaf SubGroup (no child SubGroups)',
        "subgroup z-leaf: minMember is required",
    ]


def test_min_member_on_a_mid_level_subgroup_is_refused_on_create_and_a_warning_on_update():
    old_style = podgroup(sg("group", min_member=3), sg("leader", "group", min_member=1),
                         sg("workers", "group", min_member=2))
    message = refused(review(request(old_style)))
    assert message == ('subgroup "group": minMember cannot be set on a mid-level SubGroup (has child SubGroups); '
                       "use minSubGroup instead")
    response = review(request(old_style, "UPDATE", old=GOOD))
    assert response["allowed"] is True and response["warnings"] == [message]


def test_min_subgroup_above_the_children_is_only_a_warning():
    few = podgroup(sg("a", min_subgroup=3), sg("a-0", "a", min_member=1), sg("b", min_member=1), minSubGroup=5)
    for operation in ("CREATE", "UPDATE"):
        response = review(request(few, operation, old=GOOD))
        assert response["allowed"] is True
        assert response["warnings"] == [
            'subgroup "a": minSubGroup (3) exceeds the number of direct child SubGroups (1)',
            "minSubGroup (5) exceeds the number of direct child SubGroups (2)",
        ]
    assert review(request(podgroup(minSubGroup=1)))["warnings"] == [
        "minSubGroup (1) exceeds the number of direct child SubGroups (0)"]


def test_warnings_go_with_a_refusal():
    bad = podgroup(sg("a", min_subgroup=2), sg("a-0", "a"), minSubGroup=1)
    response = review(request(bad))
    assert refused(response) == "subgroup a-0: minMember is required"
    assert response["warnings"] == ['subgroup "a": minSubGroup (2) exceeds the number of direct child SubGroups (1)']


def test_an_update_that_does_not_change_what_is_wrong_is_admitted():
    bad = podgroup(sg("a"))
    annotated = podgroup(sg("a"))
    annotated["metadata"]["annotations"] = {"kai.scheduler/last-start-timestamp": "2025-01-01T00:00:00Z"}
    assert review(request(annotated, "UPDATE", old=bad))["allowed"] is True
    assert review(request(bad, "UPDATE", old=GOOD))["allowed"] is False


def test_other_operations_and_kinds_are_admitted():
    bad = podgroup(sg("a"), sg("a"))
    assert review(request(bad, "DELETE"))["allowed"] is True
    assert review({**request(bad), "kind": {"kind": "Queue"}})["allowed"] is True
