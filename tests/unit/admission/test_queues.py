"""KAI's Queue webhook: resources are required; with quota validation, quotas above the parent's are warned
about (never refused) and a parent that cannot be read refuses the queue -- with KAI's messages."""

from __future__ import annotations

import pytest

from kai.admission.queues import QueueLookupError, review
from kai.admission.webhook import queue_reader
from kai.api.names import QUEUES
from kai.kube.client import object_path
from support.kube import FakeApi


def queue(name, cpu=0, gpu=0, memory=0, parent=None, children=(), resources=True):
    spec: dict = {}
    if resources:
        spec["resources"] = {"cpu": {"quota": cpu, "limit": -1}, "gpu": {"quota": gpu, "limit": -1},
                             "memory": {"quota": memory, "limit": -1}}
    if parent:
        spec["parentQueue"] = parent
    obj = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}
    if children:
        obj["status"] = {"childQueues": list(children)}
    return obj


def request(obj, operation="CREATE", old=None):
    return {"uid": "u-q", "kind": {"group": "scheduling.run.ai", "version": "v2", "kind": "Queue"},
            "operation": operation, "name": obj["metadata"]["name"], "object": obj, "oldObject": old}


def reader(*queues):
    by_name = {q["metadata"]["name"]: q for q in queues}

    def read(name):
        if name not in by_name:
            raise QueueLookupError(f'queues.scheduling.run.ai "{name}" not found')
        return by_name[name]

    return read


def test_a_queue_without_resources_is_refused_with_kai_s_message_and_warning():
    response = review(request(queue("q", resources=False)))
    assert response["allowed"] is False and response["status"]["message"] == "resources must be specified"
    assert response["warnings"] == ["resources must be specified"]
    assert review(request(queue("q")))["allowed"] is True
    assert review(request(queue("q", resources=False), "DELETE"))["allowed"] is True


def test_an_update_is_refused_when_it_drops_the_resources_not_when_they_were_missing_already():
    assert review(request(queue("q", resources=False), "UPDATE", old=queue("q")))["allowed"] is False
    bare = queue("q", resources=False)
    labelled = queue("q", resources=False)
    labelled["metadata"]["labels"] = {"team": "a"}
    assert review(request(labelled, "UPDATE", old=bare), reader())["allowed"] is True


def test_without_quota_validation_quotas_are_not_compared():
    response = review(request(queue("child", cpu=100, parent="missing")))
    assert response == {"uid": "u-q", "allowed": True}


def test_child_quotas_above_the_parent_s_are_admitted_with_kai_s_warnings():
    parent = queue("parent", cpu=10, gpu=4, memory=1000, children=["child", "sibling"])
    read = reader(parent, queue("sibling", cpu=6))
    response = review(request(queue("child", cpu=12, gpu=4.5, memory=2000, parent="parent")), read)
    assert response["allowed"] is True
    assert response["warnings"] == [
        "child queue CPU quota (12) exceeds parent queue parent CPU quota (10)",
        "total children CPU quota (18) exceeds parent queue parent CPU quota (10)",
        "child queue GPU quota (4.50) exceeds parent queue parent GPU quota (4.00)",
        "child queue Memory quota (2000) exceeds parent queue parent Memory quota (1000)",
    ]
    within = review(request(queue("child", cpu=4, gpu=4, memory=1000, parent="parent")), read)
    assert within == {"uid": "u-q", "allowed": True}


def test_only_cpu_is_summed_over_the_siblings_and_an_unreadable_sibling_is_left_out():
    parent = queue("parent", cpu=10, gpu=4, children=["child", "sibling", "vanished"])
    read = reader(parent, queue("sibling", cpu=5, gpu=4))
    response = review(request(queue("child", cpu=6, gpu=1, parent="parent")), read)
    assert response["warnings"] == ["total children CPU quota (11) exceeds parent queue parent CPU quota (10)"]


def test_a_parent_that_cannot_be_read_or_has_no_resources_refuses_the_queue():
    response = review(request(queue("child", parent="gone")), reader())
    assert response["allowed"] is False
    assert response["status"]["message"] == 'failed to get parent queue gone: queues.scheduling.run.ai "gone" not found'
    bare = queue("bare", resources=False)
    response = review(request(queue("child", parent="bare")), reader(bare))
    assert response["status"]["message"] == "parent queue bare has no resources defined"


def test_an_update_of_a_parent_warns_about_its_children_s_quotas():
    parent = queue("parent", cpu=10, gpu=2, memory=100, children=["a", "b", "gone"])
    read = reader(queue("a", cpu=12, gpu=1, memory=60), queue("b", cpu=3, gpu=1.5, memory=50),
                  queue("c", resources=False))
    response = review(request(parent, "UPDATE", old=parent), read)
    assert response["allowed"] is True
    assert response["warnings"] == [
        "child queue a CPU quota (12) exceeds parent CPU quota (10)",
        "total children CPU quota (15) exceeds parent CPU quota (10)",
        "total children GPU quota (2.50) exceeds parent GPU quota (2.00)",
        "total children Memory quota (110) exceeds parent Memory quota (100)",
    ]
    assert "warnings" not in review(request(parent), read)  # on CREATE KAI checks only against the parent


def test_a_child_update_checks_both_directions():
    grand = queue("grand", cpu=5, children=["mid"])
    mid = queue("mid", cpu=8, parent="grand", children=["leaf"])
    response = review(request(mid, "UPDATE", old=mid), reader(grand, queue("leaf", cpu=9)))
    assert response["warnings"] == [
        "child queue CPU quota (8) exceeds parent queue grand CPU quota (5)",
        "total children CPU quota (8) exceeds parent queue grand CPU quota (5)",
        "child queue leaf CPU quota (9) exceeds parent CPU quota (8)",
        "total children CPU quota (9) exceeds parent CPU quota (8)",
    ]


@pytest.mark.parametrize(("status", "message"), [
    (404, 'queues.scheduling.run.ai "p" not found'),
    (500, "GET /apis/scheduling.run.ai/v2/queues/p: 500 the server is unhappy"),
])
def test_the_api_reader_turns_api_errors_into_lookup_errors(status, message):
    kube = FakeApi()
    kube.add(object_path(*QUEUES, name="p"), queue("p"))
    kube.fail(status, "Boom", "GET", message="the server is unhappy")
    with pytest.raises(QueueLookupError) as error:
        queue_reader(kube)("p")
    assert str(error.value) == message
    assert queue_reader(kube)("p")["metadata"]["name"] == "p"


def typed(name, *types, parent=None):
    obj = queue(name, gpu=4, parent=parent)
    obj["spec"]["resourceTypes"] = list(types)
    return obj


A100 = {"name": "a100", "nodeSelector": {"nvidia.com/gpu.product": "A100"}, "gpu": {"quota": 2, "limit": 4}}
H100 = {"name": "h100", "nodeSelector": {"nvidia.com/gpu.product": "H100"}}


@pytest.mark.parametrize("entry, message", [
    ({**H100, "gpu": {"quota": -2}}, "spec.resourceTypes[1] (h100): gpu.quota is negative (-2); only -1 (unlimited) "
                                     "may be negative"),
    ({**H100, "gpu": {"quota": 4, "limit": 2}}, "spec.resourceTypes[1] (h100): gpu.limit 2 is below gpu.quota 4"),
    ({**H100, "gpu": {"quota": "2"}}, "spec.resourceTypes[1] (h100): gpu.quota must be a number"),
    ({**H100, "cpu": {"quota": 2}}, "spec.resourceTypes[1]: unknown field cpu (a resource type has gpu, name and "
                                    "nodeSelector; only GPUs are divided per type)"),
    ({**H100, "nodeSelector": {}}, "spec.resourceTypes[1] (h100): nodeSelector must map node labels to values, and "
                                   "name at least one"),
    ({**H100, "name": ""}, "spec.resourceTypes[1]: name must be a non-empty string"),
    ({**H100, "nodeSelector": {"pool": "big"}}, "spec.resourceTypes[1] (h100): its nodeSelector and that of a100 could "
                                                "match the same node; resource types must differ in the value of a "
                                                "label they both name"),
    ({**H100, "name": "a100"}, "spec.resourceTypes[1] (a100): resource type a100 is given twice"),
])
def test_bad_resource_types_are_refused_with_what_is_wrong(entry, message):
    response = review(request(typed("q", A100, entry)))
    assert response["allowed"] is False and response["status"]["message"] == message


def test_at_most_thirteen_resource_types():
    types = [{"name": f"t{i}", "nodeSelector": {"gpu": f"m{i}"}} for i in range(14)]
    response = review(request(typed("q", *types)))
    assert response["status"]["message"] == "spec.resourceTypes gives 14 types; a cluster may have at most 13"
    assert review(request(typed("q", *types[:13])))["allowed"] is True


def test_resource_types_are_admitted_and_a_child_may_give_only_its_parent_s_types():
    assert review(request(typed("q", A100, H100)))["allowed"] is True
    read = reader(typed("dept", A100))
    assert review(request(typed("team", A100, parent="dept")), read)["allowed"] is True
    response = review(request(typed("team", H100, parent="dept")), read)
    assert response["status"]["message"] == "resource type h100 is unknown to parent queue dept, which gives a100"
    other = {**A100, "nodeSelector": {"nvidia.com/gpu.product": "A100-80GB"}}
    response = review(request(typed("team", other, parent="dept")), read)
    assert response["status"]["message"] == "resource type a100 has another nodeSelector in parent queue dept"
    # without quota validation there is no parent to compare with
    assert review(request(typed("team", H100, parent="dept")))["allowed"] is True


def test_an_update_that_leaves_bad_resource_types_as_they_were_is_admitted():
    bad = typed("q", {**H100, "gpu": {"quota": -2}})
    labelled = typed("q", {**H100, "gpu": {"quota": -2}})
    labelled["metadata"]["labels"] = {"team": "x"}
    assert review(request(labelled, "UPDATE", bad))["allowed"] is True
