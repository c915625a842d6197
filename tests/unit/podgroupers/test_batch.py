"""Job, CronJob and RunaiJob podgroupers."""

import pytest

from kai.api.podgroup import GroupingError
from kai.testing_podgroupers import group, obj, pod


def pi_job(**spec):
    # The "pi" example of the Kubernetes Job documentation.
    return obj(
        "batch/v1", "Job", "pi", uid="j1", labels={"kai.scheduler/queue": "research"}, spec={"backoffLimit": 4, **spec}
    )


def legacy_podgroup(name):
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": 1},
    }


def test_the_pods_of_a_job_share_one_podgroup():
    job = pi_job(parallelism=3, completions=6)
    first, second = (group(pod(name, owner=job), job) for name in ("pi-abcde", "pi-fghij"))
    assert (first.name, first.min_available, first.queue) == ("pg-pi-j1", 1, "research")
    assert second.name == first.name
    assert first.owner.kind == "Job"


def test_batch_min_member_annotation_sets_the_gang_size():
    job = pi_job(parallelism=4)
    job["metadata"]["annotations"] = {"kai.scheduler/batch-min-member": "4"}
    assert group(pod("pi-abcde", owner=job), job).min_available == 4


@pytest.mark.parametrize("value", ["abc", "1.5", "", "99999999999"])
def test_invalid_batch_min_member_is_an_error(value):
    job = pi_job()
    job["metadata"]["annotations"] = {"kai.scheduler/batch-min-member": value}
    with pytest.raises(GroupingError, match="invalid min-member annotation value: strconv.ParseInt"):
        group(pod("pi-abcde", owner=job), job)


def test_a_pod_keeps_its_per_pod_podgroup_of_an_older_release():
    job = pi_job(parallelism=2)
    job["metadata"]["annotations"] = {"kai.scheduler/batch-min-member": "2"}
    legacy = legacy_podgroup("pg-pi-abcde-j1")
    old = group(pod("pi-abcde", owner=job), job, legacy)
    assert (old.name, old.min_available) == ("pg-pi-abcde-j1", 1)
    new = group(pod("pi-fghij", owner=job), job, legacy)
    assert (new.name, new.min_available) == ("pg-pi-j1", 2)
    off = group(pod("pi-abcde", owner=job), job, legacy, arguments={"job": {"searchForLegacyPodGroups": False}})
    assert off.name == "pg-pi-j1"


def test_cronjob_groups_by_the_job_it_started():
    # The "hello" example of the Kubernetes CronJob documentation.
    cron = obj("batch/v1", "CronJob", "hello", uid="c1", spec={"schedule": "* * * * *"})
    job = obj("batch/v1", "Job", "hello-28001", uid="j7", owner=cron)
    metadata = group(pod("hello-28001-q8x", owner=job), cron, job)
    assert metadata.name == "pg-hello-28001-j7"
    assert metadata.owner.to_dict() == {"apiVersion": "batch/v1", "kind": "Job", "name": "hello-28001", "uid": "j7"}


def test_cronjob_pod_without_job_owner_is_an_error():
    cron = obj("batch/v1", "CronJob", "hello", uid="c1")
    with pytest.raises(GroupingError, match="no owner reference of type 'Job'"):
        group(pod("hello-x", owner=cron), cron)


def test_runaijob_strips_the_last_suffix_of_the_pod_name():
    job = obj("run.ai/v1", "RunaiJob", "hpo", uid="r1")
    assert group(pod("hpo-3-0", owner=job), job).name == "pg-hpo-3-r1"
