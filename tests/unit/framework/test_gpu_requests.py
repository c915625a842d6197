"""GPU request forms: sharing annotations and their validation, MIG profiles and node GPU types."""

import pytest

from kai import testing as kt
from kai.api import GPU, GpuRequestError, ResourceRequest, gpu_memory_from_label, parse_gpu_sharing

MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


# --- parsing -----------------------------------------------------------------------------------------


def test_sharing_annotations_parse_into_fraction_devices_and_memory():
    assert parse_gpu_sharing({}) == (0.0, 1, 0)
    assert parse_gpu_sharing({"gpu-fraction": "0.5"}) == (0.5, 1, 0)
    assert parse_gpu_sharing({"gpu-fraction": "1"}) == (1.0, 1, 0)
    assert parse_gpu_sharing({"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"}) == (0.25, 2, 0)
    assert parse_gpu_sharing({"gpu-memory": "2000", "gpu-fraction-num-devices": "3"}) == (0.0, 3, 2000)
    assert parse_gpu_sharing({"other": "x"}, gpu_limit=2) == (0.0, 1, 0)


@pytest.mark.parametrize("annotations, limit, field", [
    ({"gpu-fraction": "half"}, 0, "gpu-fraction"),
    ({"gpu-fraction": "1.5"}, 0, "gpu-fraction"),
    ({"gpu-fraction": "0"}, 0, "gpu-fraction"),
    ({"gpu-fraction": "-0.5"}, 0, "gpu-fraction"),
    ({"gpu-fraction": "nan"}, 0, "gpu-fraction"),
    ({"gpu-fraction": "0.5", "gpu-memory": "100"}, 0, "gpu-memory"),
    ({"gpu-memory": "lots"}, 0, "gpu-memory"),
    ({"gpu-memory": "0"}, 0, "gpu-memory"),
    ({"gpu-fraction-num-devices": "2"}, 0, "gpu-fraction-num-devices"),
    ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "two"}, 0, "gpu-fraction-num-devices"),
    ({"gpu-fraction": "0.5"}, 1, GPU),
    ({"gpu-memory": "100"}, 2, GPU),
])
def test_bad_sharing_annotations_name_the_field(annotations, limit, field):
    with pytest.raises(GpuRequestError) as err:
        parse_gpu_sharing(annotations, gpu_limit=limit)
    assert err.value.field == field and field in str(err.value)


def test_node_gpu_memory_label_is_floored_and_bytes_are_converted():
    assert gpu_memory_from_label("40960") == 40900
    assert gpu_memory_from_label(str(80 * 2**30)) == 81900
    assert gpu_memory_from_label(None) == 0 and gpu_memory_from_label("many") == 0


def test_mig_and_fraction_quota():
    assert ResourceRequest(mig={MIG_3G: 2, MIG_1G: 1}).quota_gpus() == 7
    assert ResourceRequest(gpu_fraction=0.25, gpu_devices=2).quota_gpus() == 0.5
    assert ResourceRequest(gpu_memory_mib=500).accepted_gpus(1300) == 0.39


# --- bad requests in a snapshot ------------------------------------------------------------------------


@pytest.mark.parametrize("request_, field", [
    (ResourceRequest(gpu_fraction=1.5), "gpu-fraction"),
    (ResourceRequest(gpu_fraction=0.5, gpu_memory_mib=100), "gpu-memory"),
    (ResourceRequest(gpus=1, gpu_fraction=0.5), GPU),
    (ResourceRequest(gpus=1, gpu_devices=2), "gpu-fraction-num-devices"),
    (ResourceRequest(mig={"nvidia.com/mig-big": 1}), "nvidia.com/mig-big"),
])
def test_a_task_with_a_bad_request_stays_pending_with_the_reason(request_, field):
    bad = kt.job("bad", queue="q", tasks=[kt.task("bad-0", request=request_)])
    good = kt.job("good", queue="q", gpus=1)
    snapshot = kt.cluster(nodes=[kt.node("n1", gpus=2, gpu_memory_mib=1000)], jobs=[bad, good])
    (problem,) = snapshot.problems
    assert problem.reason == "InvalidPod" and field in problem.message
    session = kt.run(snapshot)
    assert kt.placements(session) == {"good-0": "n1"}
    assert field in kt.fit_error(session, "bad-0")
    assert field in session.job_fit_message(session.jobs["default/bad"])


# --- MIG and node GPU types ------------------------------------------------------------------------------


def mig_node(name, strategy, gpus=0, profiles=None):
    labels = {"node-role.kubernetes.io/mig-enabled": "true", "nvidia.com/mig.strategy": strategy}
    return kt.node(name, gpus=gpus, labels=labels, scalars=profiles or {}, gpu_memory_mib=1000)


def run_one(task, nodes):
    return kt.run(kt.cluster(nodes=nodes, jobs=[kt.job(task.name.rsplit("-", 1)[0], queue="q", tasks=[task])]))


def mig_task(name="m-0", profile=MIG_1G, count=1, **fields):
    return kt.task(name, request=ResourceRequest(cpu=1000, memory=2**30, mig={profile: count}), **fields)


def test_mixed_strategy_nodes_take_only_mig_requests():
    nodes = [mig_node("mixed", "mixed", profiles={MIG_1G: 2})]
    assert kt.placements(run_one(mig_task(count=2), nodes)) == {"m-0": "mixed"}
    whole = run_one(kt.task("w-0", gpus=1), [mig_node("mixed", "mixed", gpus=1, profiles={MIG_1G: 2})])
    assert "non MIG jobs cant run on a node with MigStrategy='mixed'" in kt.fit_error(whole, "w-0")
    assert kt.placements(run_one(kt.task("c-0"), nodes)) == {"c-0": "mixed"}


def test_mig_profiles_are_counted_per_profile():
    node = mig_node("mixed", "mixed", profiles={MIG_1G: 3, MIG_3G: 1})
    running = kt.job("r", queue="q", tasks=[mig_task("r-0", status="Running", node="mixed")])
    session = kt.run(kt.cluster(nodes=[node], jobs=[running, kt.job("m", queue="q", tasks=[mig_task(count=3)])]))
    assert "node(s) didn't have enough of mig profile: nvidia.com/mig-1g.10gb" in kt.fit_error(session, "m-0")


def test_more_of_a_mig_profile_than_any_node_has_names_the_profile():
    session = run_one(mig_task(count=3), [mig_node("mixed", "mixed", profiles={MIG_1G: 2, MIG_3G: 1})])
    assert kt.fit_error(session, "m-0") == (
        "Scheduling conditions were not met for pod default/m-0:\nMaxNodePoolResources: The pod default/m-0 requires "
        "GPU: 3, CPU: 1 (cores), memory: 1.074 (GB), pods: 1, mig nvidia.com/mig-1g.10gb: 3. No node in the default "
        "node-pool has nvidia.com/mig-1g.10gb resources.\n")


def test_single_strategy_nodes_take_only_whole_gpu_requests():
    nodes = [mig_node("single", "single", gpus=2)]
    assert kt.placements(run_one(kt.task("w-0", gpus=2), nodes)) == {"w-0": "single"}
    frac = kt.task("f-0", request=ResourceRequest(cpu=1000, memory=2**30, gpu_fraction=0.5))
    assert "only whole gpu jobs can run on a node with MigStrategy='single'" in kt.fit_error(
        run_one(frac, [mig_node("single", "single", gpus=2)]), "f-0")


def test_mig_requests_need_a_mig_node():
    plain = kt.node("plain", gpus=2, scalars={MIG_1G: 1})
    plain.labels["node-role.kubernetes.io/mig-enabled"] = "false"
    assert "MIG job cannot be scheduled on non-MIG node" in kt.fit_error(run_one(mig_task(), [plain]), "m-0")


def test_legacy_mig_pods_never_run_and_keep_new_mig_pods_off_their_node():
    legacy = kt.task("l-0", legacy_mig=True)
    session = run_one(legacy, [mig_node("mixed", "mixed", profiles={MIG_1G: 2})])
    assert session.decisions == []
    assert "Legacy MIG jobs cannot be scheduled on node mixed" in kt.fit_error(session, "l-0")
    running = kt.job("l", queue="q", tasks=[kt.task("l-0", legacy_mig=True, status="Running", node="mixed")])
    snapshot = kt.cluster(nodes=[mig_node("mixed", "mixed", profiles={MIG_1G: 2})],
                          jobs=[running, kt.job("m", queue="q", tasks=[mig_task()])])
    blocked = kt.run(snapshot)
    assert blocked.decisions == [] and "legacy MIG jobs" in kt.fit_error(blocked, "m-0")


def test_gpu_memory_requests_need_a_node_that_reports_its_gpu_memory():
    task = kt.task("g-0", request=ResourceRequest(cpu=1000, memory=2**30, gpu_memory_mib=100))
    session = run_one(task, [kt.node("n1", gpus=1)])
    assert "the gpu memory count on the node was not synced yet" in kt.fit_error(session, "g-0")
