"""KAI's Topology webhook: aliases are unique and never a level's node label, with KAI's message."""

from __future__ import annotations

from kai.admission.topologies import review


def topology(*levels):
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "dc"},
            "spec": {"levels": [{"nodeLabel": label, **({"alias": alias} if alias else {})}
                                for label, alias in levels]}}


def request(obj, operation="CREATE", old=None):
    return {"uid": "u-t", "kind": {"group": "kai.scheduler", "version": "v1alpha1", "kind": "Topology"},
            "operation": operation, "name": "dc", "object": obj, "oldObject": old}


def test_distinct_aliases_and_levels_without_alias_are_admitted():
    good = topology(("cloud/zone", "zone"), ("cloud/rack", None), ("kubernetes.io/hostname", "host"))
    assert review(request(good)) == {"uid": "u-t", "allowed": True}


def test_duplicated_aliases_are_refused_sorted_as_kai_lists_them():
    bad = topology(("cloud/zone", "z"), ("cloud/rack", "r"), ("cloud/row", "z"), ("cloud/pod", "r"),
                   ("cloud/cell", "r"))
    response = review(request(bad))
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert response["status"]["message"] == (
        "invalid topology aliases: aliases must be unique within the topology; duplicated: [r r z]")


def test_an_alias_equal_to_a_node_label_is_refused_with_both_faults_together():
    bad = topology(("cloud/zone", "cloud/rack"), ("cloud/rack", "rack"), ("cloud/row", "rack"))
    assert review(request(bad))["status"]["message"] == (
        "invalid topology aliases: aliases must be unique within the topology; duplicated: [rack]; "
        "an alias must not equal a nodeLabel; conflicting: [cloud/rack]")


def test_an_alias_edit_is_checked_on_update_and_an_unchanged_fault_lets_the_update_through():
    good, bad = topology(("cloud/zone", "zone"), ("cloud/rack", "rack")), topology(("a", "x"), ("b", "x"))
    assert review(request(topology(("cloud/zone", "zone"), ("cloud/rack", "zone")), "UPDATE", old=good))[
        "allowed"] is False
    relabelled = topology(("a", "x"), ("b", "x"))
    relabelled["metadata"]["labels"] = {"owner": "infra"}
    assert review(request(relabelled, "UPDATE", old=bad))["allowed"] is True
    assert review(request(bad, "DELETE"))["allowed"] is True
