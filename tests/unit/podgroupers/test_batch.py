"""Job, CronJob and RunaiJob podgroupers."""

import pytest

from kai.api.podgroup import GroupingError
from kai.testing_podgroupers import group, obj, pod


def pi_job(**spec):
    # The "pi" example of the Kubernetes Job documentation.
    return obj(
        "batch/v1", "Job", "pi", uid="j1", labels={"kai.scheduler/queue": "research"}, spec={"backoffLimit": 4, **spec}
    )


def test_each_job_pod_is_its_own_podgroup():
    job = pi_job(parallelism=3, completions=6)
    metadata = group(pod("pi-abcde", owner=job), job)
    assert (metadata.name, metadata.min_available, metadata.queue) == ("pg-pi-abcde-j1", 1, "research")
    assert metadata.owner.kind == "Job"


def test_legacy_podgroup_is_reused():
    job = pi_job()
    legacy = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg-pi-j1", "namespace": "default"},
        "spec": {"minMember": 1},
    }
    p = pod("pi-abcde", owner=job)
    assert group(p, job, legacy).name == "pg-pi-j1"
    assert group(p, job, legacy, args={"job": {"searchForLegacyPodGroups": False}}).name == "pg-pi-abcde-j1"


def test_legacy_name_of_parallel_job_uses_the_pod_name():
    job = pi_job(parallelism=2)
    legacy = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg-pi-abcde-j1", "namespace": "default"},
    }
    assert group(pod("pi-abcde", owner=job), job, legacy).name == "pg-pi-abcde-j1"


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
