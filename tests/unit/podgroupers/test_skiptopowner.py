"""Skip-top-owner podgroupers: Argo Workflow, Kubeflow Trainer TrainJob and Run:ai workloads."""

from kai.grouping.hub import GroupingConfig
from kai.testing_podgroupers import group, obj, pod


def test_argo_workflow_step_pods_are_grouped_as_bare_pods():
    # The hello-world Argo example: the step pod is owned by the Workflow directly.
    wf = obj(
        "argoproj.io/v1alpha1",
        "Workflow",
        "hello-world-x7k",
        uid="w1",
        labels={"kai.scheduler/queue": "ci"},
        annotations={"team": "infra"},
    )
    p = pod("hello-world-x7k", owner=wf, uid="p1")
    metadata = group(p, wf)
    assert metadata.name == "pg-hello-world-x7k-p1"
    assert metadata.owner.kind == "Pod"
    assert metadata.queue == "ci"
    assert metadata.annotations["team"] == "infra"


def test_trainjob_is_grouped_by_its_jobset():
    trainjob = obj(
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        "pytorch-distributed",
        uid="tj1",
        labels={"kai.scheduler/queue": "train-q"},
    )
    jobset = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "pytorch-distributed",
        uid="js1",
        owner=trainjob,
        spec={
            "replicatedJobs": [
                {"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 2, "completions": 2}}}
            ]
        },
    )
    job = obj("batch/v1", "Job", "pytorch-distributed-node-0", uid="j1", owner=jobset)
    job_labels = {"jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "0"}
    p = pod("pytorch-distributed-node-0-0-abc", owner=job, labels=job_labels)
    metadata = group(p, trainjob, jobset, job)
    assert (metadata.name, metadata.min_subgroup, metadata.queue) == ("pg-pytorch-distributed-js1", 1, "train-q")
    leaf = metadata.subgroups[1]
    assert (leaf.name, leaf.min_available, leaf.pods) == ("node-replica-0", 2, [p["metadata"]["name"]])


def test_runai_workload_any_version():
    workload = obj("run.ai/v2alpha1", "TrainingWorkload", "wl", uid="t1", labels={"project": "p1"})
    rj = obj("run.ai/v1", "RunaiJob", "wl", uid="r1", owner=workload)
    p = pod("wl-0-0", owner=rj)
    metadata = group(p, workload, rj)
    assert (metadata.name, metadata.queue) == ("pg-wl-0-r1", "p1")


def test_own_labels_win_over_the_skipped_owner():
    wf = obj("argoproj.io/v1alpha1", "Workflow", "wf", uid="w1", labels={"kai.scheduler/queue": "from-wf"})
    inner = obj("batch/v1", "Job", "inner", uid="j1", owner=wf, labels={"kai.scheduler/queue": "from-job"})
    assert group(pod("inner-x", owner=inner), wf, inner).queue == "from-job"


def test_the_skipped_owners_kind_defaults_become_labels_of_the_owner_below():
    # KAI's "defaults propagation from skipped owner": a DynamoGraphDeployment (any version) owning a pod.
    types = '[{"typeName":"DynamoGraphDeployment","group":"nvidia.com","priorityName":"very-high",' \
            '"preemptibility":"non-preemptible"}]'
    configmap = obj("v1", "ConfigMap", "defaults", data={"types": types})
    very_high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "very-high"}}
    dgd = obj("nvidia.com/v1beta1", "DynamoGraphDeployment", "dgd", uid="d1")
    p = pod("dgd-frontend-0", owner=dgd, uid="p1")
    config = GroupingConfig(defaults_configmap=("default", "defaults"))
    metadata = group(p, dgd, configmap, very_high, config=config)
    assert (metadata.name, metadata.priority_class, metadata.preemptibility) == (
        "pg-dgd-frontend-0-p1", "very-high", "non-preemptible")
    assert group(p, dgd, very_high).priority_class == "train"  # no defaults ConfigMap: the fallback
