"""A workload labelled semi-preemptible gets a PodGroup the scheduler reads as semi-preemptible."""

from kai.grouping.podgroups import podgroup_object
from kai.kube.views import is_preemptible, is_semi_preemptible, podgroup_view
from kai.testing_podgroupers import group, obj, pod


def test_a_semi_preemptible_workload_label_becomes_the_podgroups_label_not_its_spec():
    sts = obj("apps/v1", "StatefulSet", "infer", uid="s1", labels={"kai.scheduler/preemptibility": "semi-preemptible"})
    metadata = group(pod("infer-0", owner=sts), sts)
    assert metadata.preemptibility == "semi-preemptible"
    body = podgroup_object(metadata)
    assert "preemptibility" not in body["spec"]  # KAI v0.17's CRD takes only preemptible and non-preemptible there
    assert body["metadata"]["labels"]["kai.scheduler/preemptibility"] == "semi-preemptible"
    view = podgroup_view(body)
    assert is_semi_preemptible(view) and is_preemptible(view, 150)


def test_other_preemptibilities_stay_in_the_spec():
    sts = obj("apps/v1", "StatefulSet", "db", uid="s1", labels={"kai.scheduler/preemptibility": "non-preemptible"})
    body = podgroup_object(group(pod("db-0", owner=sts), sts))
    assert body["spec"]["preemptibility"] == "non-preemptible"
